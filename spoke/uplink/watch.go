package uplink

import (
	"context"
	"slices"
	"strings"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// Watch states shown at /debug/uplink.
const (
	WatchOff         = "off"
	WatchSubscribing = "subscribing"
	WatchSynced      = "synced"
	WatchDown        = "down"
	WatchUnsupported = "unsupported"
)

// watchLoop keeps a Watch stream open on conn's client beside the Push
// session, until ctx ends: what the hub sends goes into Options.View,
// which is saved to Options.ViewFile. A hub that does not serve Watch is
// asked again only on the next connection.
func (u *Uplink) watchLoop(ctx context.Context, client protocolv1.SyncClient) {
	u.mu.Lock()
	u.refusedTypes = nil
	u.mu.Unlock()
	for {
		err := u.watch(ctx, client)
		if ctx.Err() != nil {
			return
		}
		if t := u.optionalTypeRefused(err); t != "" {
			if u.opts.NoRemoteConfig && t == protocol.MeshConfigTypeURL {
				u.setWatch(WatchUnsupported, err)
				return // nothing else is watched
			}
			continue // at once, without the refused type
		}
		if status.Code(err) == codes.Unimplemented {
			u.setWatch(WatchUnsupported, err)
			u.log.Warn("the hub does not serve Watch; the remote view is not updated", "err", err)
			return
		}
		u.setWatch(WatchDown, err)
		u.log.Warn("hub watch lost; retrying", "in", time.Second, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (u *Uplink) setWatch(s string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.watchState = s
	if err != nil {
		u.watchErr = err.Error()
	}
}

// optionalTypes are the Watch types a hub older than them refuses
// (ending the stream with InvalidArgument naming the type URL): the
// spoke then watches without them. Without the mesh config its fallback
// and injection use Istio's defaults; without the mesh networks its
// fallback builds with none.
var optionalTypes = []string{protocol.MeshConfigTypeURL, protocol.MeshNetworksTypeURL}

// optionalTypeRefused returns the optional type err is a hub's refusal
// of, the first time it is refused on this connection; "" otherwise.
func (u *Uplink) optionalTypeRefused(err error) string {
	if status.Code(err) != codes.InvalidArgument {
		return ""
	}
	msg := status.Convert(err).Message()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, t := range optionalTypes {
		if strings.Contains(msg, t) && !slices.Contains(u.refusedTypes, t) {
			u.refusedTypes = append(u.refusedTypes, t)
			u.log.Warn("the hub does not serve a type on Watch; watching without it", "type", t, "err", err)
			return t
		}
	}
	return ""
}

// watchTypes are the types a Watch stream subscribes to.
func (u *Uplink) watchTypes() []string {
	u.mu.Lock()
	skip := slices.Clone(u.refusedTypes)
	u.mu.Unlock()
	types := protocol.WatchTypeURLs()
	if u.opts.NoRemoteConfig {
		types = []string{protocol.MeshConfigTypeURL, protocol.GatewayAPIStatusTypeURL}
	}
	return slices.DeleteFunc(types, func(t string) bool { return slices.Contains(skip, t) })
}

// watch dials one Watch stream and runs it (runWatch).
func (u *Uplink) watch(ctx context.Context, client protocolv1.SyncClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	u.setWatch(WatchSubscribing, nil)
	md := metadata.Pairs(protocol.MetadataMesh, u.opts.Mesh, protocol.MetadataCluster, u.opts.Cluster, protocol.MetadataProtocol, protocol.Version)
	stream, err := client.Watch(metadata.NewOutgoingContext(ctx, md), grpc.WaitForReady(false))
	if err != nil {
		return err
	}
	return u.runWatch(stream)
}

// watchStream is the spoke's end of a Watch stream, whoever dialled: a
// Watch client stream (protocolv1.Sync_WatchClient) or a PollWatch server
// stream (protocolv1.Polled_PollWatchServer) carry the same messages.
type watchStream interface {
	Send(*discoveryv3.DeltaDiscoveryRequest) error
	Recv() (*discoveryv3.DeltaDiscoveryResponse, error)
}

// runWatch subscribes on stream to every type with what the view holds as
// initial versions, then to the synced marker, and applies, ACKs or NACKs
// every response until the stream ends.
func (u *Uplink) runWatch(stream watchStream) error {
	held := u.opts.View.Held()
	for _, typeURL := range u.watchTypes() {
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, InitialResourceVersions: held[typeURL]}); err != nil {
			return err
		}
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: protocol.SyncedTypeURL}); err != nil {
		return err
	}
	saver := newSaver(u)
	defer saver.stop()
	for {
		r, err := stream.Recv()
		if err != nil {
			return err
		}
		reply := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}
		if r.GetTypeUrl() == protocol.SyncedTypeURL {
			u.opts.View.MarkComplete()
			saver.now()
			if u.opts.OnSynced != nil {
				u.opts.OnSynced()
			}
			u.setWatch(WatchSynced, nil)
			u.log.Info("remote view synced", "clusters", len(u.opts.View.Objects()))
		} else if rejections := u.opts.View.Apply(r); len(rejections) > 0 {
			reply.ErrorDetail = protocol.RejectionStatus(rejections)
			u.metrics.watchNacks.Inc()
			u.log.Warn("refused resources the hub sent on Watch", "type", r.GetTypeUrl(), "reason", reply.ErrorDetail.GetMessage())
		} else if u.opts.View.Complete() {
			saver.soon()
		}
		u.metrics.watchResponses.Inc()
		if err := stream.Send(reply); err != nil {
			return err
		}
	}
}

// saver writes the view to Options.ViewFile: at once when asked, or at
// most once per second after changes.
type saver struct {
	u     *Uplink
	timer *time.Timer
}

func newSaver(u *Uplink) *saver { return &saver{u: u} }

func (s *saver) save() {
	if s.u.opts.ViewFile == "" {
		return
	}
	if err := s.u.opts.View.Save(s.u.opts.ViewFile); err != nil {
		s.u.log.Error("remote view not saved", "file", s.u.opts.ViewFile, "err", err)
		return
	}
	s.u.metrics.viewSaves.Inc()
}

func (s *saver) now() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.save()
}

func (s *saver) soon() {
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Second, func() { s.save() })
	}
}

// stop saves what is pending at once.
func (s *saver) stop() {
	if s.timer != nil && s.timer.Stop() {
		s.save()
	}
}
