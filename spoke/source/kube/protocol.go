package kube

import "strings"

// Port protocols, named as Istio names them.
const (
	protoHTTP    = "HTTP"
	protoHTTP2   = "HTTP2"
	protoHTTPS   = "HTTPS"
	protoGRPC    = "GRPC"
	protoGRPCWeb = "GRPC-Web"
	protoTCP     = "TCP"
	protoTLS     = "TLS"
	protoMongo   = "Mongo"
	protoRedis   = "Redis"
	protoMySQL   = "MySQL"
)

// protocolNames maps a lowercase protocol name to Istio's name for it.
var protocolNames = map[string]string{
	"http":     protoHTTP,
	"http2":    protoHTTP2,
	"https":    protoHTTPS,
	"grpc":     protoGRPC,
	"grpc-web": protoGRPCWeb,
	"tcp":      protoTCP,
	"tls":      protoTLS,
	"mongo":    protoMongo,
	"redis":    protoRedis,
	"mysql":    protoMySQL,
}

// appProtocols are the Kubernetes-defined appProtocol values
// (KEP-3726) that name a protocol Istio knows.
var appProtocols = map[string]string{
	"kubernetes.io/h2c": protoHTTP2,
	"kubernetes.io/ws":  protoHTTP,
	"kubernetes.io/wss": protoHTTPS,
}

// portProtocol infers a TCP service port's protocol as Istio does: from
// its appProtocol when that names a known protocol, else from the port
// name ("http", or a prefix before '-' such as "grpc-api"; "grpc-web"
// counts whole), else none: "", a port whose protocol sidecars sniff
// (HTTP detected, anything else TCP), as Istio's do.
func portProtocol(name string, appProtocol *string) string {
	if appProtocol != nil {
		ap := strings.ToLower(*appProtocol)
		if p, ok := appProtocols[ap]; ok {
			return p
		}
		if p, ok := protocolNames[ap]; ok {
			return p
		}
	}
	lower := strings.ToLower(name)
	if lower == "grpc-web" || strings.HasPrefix(lower, "grpc-web-") {
		return protoGRPCWeb
	}
	prefix, _, _ := strings.Cut(lower, "-")
	if p, ok := protocolNames[prefix]; ok {
		return p
	}
	return ""
}
