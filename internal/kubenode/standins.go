package kubenode

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// startStandIns starts, in this process, what stands in for the scheduler (a binder), kube-proxy
// (a service proxy) and CoreDNS (a DNS server) on the one node, and waits for their caches;
// they stop when ctx ends (Stop waits for them).
func (n *Node) startStandIns(ctx context.Context) error {
	pending := informers.NewSharedInformerFactoryWithOptions(n.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" }))
	bind := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			n.bind(ctx, pod)
		}
	}
	if _, err := pending.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    bind,
		UpdateFunc: func(_, obj any) { bind(obj) },
	}); err != nil {
		return fmt.Errorf("the binder: %w", err)
	}

	all := informers.NewSharedInformerFactory(n.Client, 0)
	services, slices := all.Core().V1().Services(), all.Discovery().V1().EndpointSlices()
	proxy := &serviceProxy{services: services.Lister(), slices: slices.Lister(), apiserver: n.Cluster.Port}
	n.dns = &dnsServer{services: services.Lister(), slices: slices.Lister()}
	if err := installProxyChains(ctx); err != nil {
		return fmt.Errorf("the service proxy: %w", err)
	}
	resync := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case resync <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke}
	for _, inf := range []cache.SharedIndexInformer{services.Informer(), slices.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("the service proxy: %w", err)
		}
	}
	pending.Start(ctx.Done())
	all.Start(ctx.Done())
	n.standIns.Add(1)
	go func() {
		defer n.standIns.Done()
		<-ctx.Done()
		pending.Shutdown()
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

// bind assigns pod to the node, as the scheduler would with one node to choose from.
func (n *Node) bind(ctx context.Context, pod *corev1.Pod) {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: Name},
	}
	if err := n.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		n.t.Logf("binding pod %s/%s to %s: %v", pod.Namespace, pod.Name, Name, err)
	}
}

// AddHost makes the node's DNS server answer name (a name a manifest dials, such as the hub's
// spokes.nave.example.com) with the address of Service namespace/service, as a DNS record
// pointing at a load balancer would.
func (n *Node) AddHost(name, namespace, service string) { n.dns.addAlias(name, namespace, service) }
