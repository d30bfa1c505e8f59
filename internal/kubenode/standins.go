package kubenode

import (
	"context"
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// wakeOn is an event handler that signals wake (without blocking) on every event.
func wakeOn(wake chan struct{}) cache.ResourceEventHandler {
	poke := func(any) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke}
}

// startStandIns starts, in this process, what stands in for the scheduler (a binder), kube-proxy
// (a service proxy) and CoreDNS (a DNS server) on the one node, and waits for their caches;
// they stop when ctx ends (Stop waits for them).
func (n *Node) startStandIns(ctx context.Context) error {
	all := informers.NewSharedInformerFactory(n.Client, 0)
	services, slices := all.Core().V1().Services(), all.Discovery().V1().EndpointSlices()
	pods, nodes := all.Core().V1().Pods(), all.Core().V1().Nodes()
	binder := &binder{n: n, pods: pods.Lister(), nodes: nodes.Lister(), wake: make(chan struct{}, 1)}
	for _, inf := range []cache.SharedIndexInformer{pods.Informer(), nodes.Informer()} {
		if _, err := inf.AddEventHandler(wakeOn(binder.wake)); err != nil {
			return fmt.Errorf("the binder: %w", err)
		}
	}
	proxy := &serviceProxy{services: services.Lister(), slices: slices.Lister(), apiserver: n.Cluster.Port}
	n.dns = &dnsServer{services: services.Lister(), slices: slices.Lister()}
	if err := installProxyChains(ctx); err != nil {
		return fmt.Errorf("the service proxy: %w", err)
	}
	resync := make(chan struct{}, 1)
	for _, inf := range []cache.SharedIndexInformer{services.Informer(), slices.Informer()} {
		if _, err := inf.AddEventHandler(wakeOn(resync)); err != nil {
			return fmt.Errorf("the service proxy: %w", err)
		}
	}
	all.Start(ctx.Done())
	n.standIns.Add(1)
	go func() {
		defer n.standIns.Done()
		<-ctx.Done()
		all.Shutdown()
	}()
	for typ, ok := range all.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the stand-ins' cache of %v did not sync", typ)
		}
	}
	if err := n.dns.serve(ctx, &n.standIns); err != nil {
		return fmt.Errorf("the DNS server: %w", err)
	}
	if err := proxy.sync(ctx); err != nil {
		return fmt.Errorf("the service proxy: %w", err)
	}
	n.standIns.Add(1)
	go func() {
		defer n.standIns.Done()
		binder.run(ctx)
	}()
	n.standIns.Add(1)
	go func() {
		defer n.standIns.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-resync:
				if err := proxy.sync(ctx); err != nil && ctx.Err() == nil {
					n.t.Errorf("service proxy: %v", err)
				}
			}
		}
	}()
	return nil
}

// AddHost makes the node's DNS server answer name (a name a manifest dials, such as the hub's
// spokes.nave.example.com) with the address of Service namespace/service, as a DNS record
// pointing at a load balancer would.
func (n *Node) AddHost(name, namespace, service string) { n.dns.addAlias(name, namespace, service) }
