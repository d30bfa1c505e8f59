package kubenode

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	listersv1 "k8s.io/client-go/listers/core/v1"
)

// binder stands in for kube-scheduler on the one node: it binds each pending pod, oldest
// first, once the node's allocatable CPU and memory hold its requests next to those of the pods
// already on it (terminating ones included), as the scheduler's resource fit does. Without that
// check the kubelet refuses the pod (OutOfcpu: a Deployment's replacement pod arriving while
// the pod it replaces still terminates) and the ReplicaSet makes failed pods in a loop. It runs
// in one goroutine (run).
type binder struct {
	n     *Node
	pods  listersv1.PodLister
	nodes listersv1.NodeLister
	wake  chan struct{}
}

// run binds what fits on every change of a pod or the node, until ctx ends.
func (b *binder) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
			b.bindPending(ctx)
		}
	}
}

func (b *binder) bindPending(ctx context.Context) {
	node, err := b.nodes.Get(Name)
	if err != nil {
		return // not registered yet; its registration wakes us
	}
	all, err := b.pods.List(labels.Everything())
	if err != nil {
		return
	}
	var pending []*corev1.Pod
	cpu, mem := resource.Quantity{}, resource.Quantity{}
	for _, p := range all {
		switch {
		case p.Spec.NodeName == "" && p.DeletionTimestamp == nil:
			pending = append(pending, p)
		case p.Spec.NodeName == Name && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed:
			c, m := requests(p)
			cpu.Add(c)
			mem.Add(m)
		}
	}
	sort.Slice(pending, func(i, j int) bool {
		return pending[i].CreationTimestamp.Before(&pending[j].CreationTimestamp)
	})
	for _, p := range pending {
		c, m := requests(p)
		nc, nm := cpu.DeepCopy(), mem.DeepCopy()
		nc.Add(c)
		nm.Add(m)
		if nc.Cmp(*node.Status.Allocatable.Cpu()) > 0 || nm.Cmp(*node.Status.Allocatable.Memory()) > 0 {
			continue // a pod finishing wakes us
		}
		bind := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: Name},
		}
		if err := b.n.Client.CoreV1().Pods(p.Namespace).Bind(ctx, bind, metav1.CreateOptions{}); err != nil {
			// A conflict: the pod was bound by an earlier pass the cache had not seen yet.
			if ctx.Err() == nil && !apierrors.IsConflict(err) {
				b.n.t.Logf("binding pod %s/%s to %s: %v", p.Namespace, p.Name, Name, err)
			}
			continue
		}
		cpu, mem = nc, nm
	}
}

// requests are the pod's CPU and memory requests as the scheduler counts them: the sum of its
// containers', or an init container's if larger.
func requests(p *corev1.Pod) (cpu, mem resource.Quantity) {
	for _, c := range p.Spec.Containers {
		cpu.Add(*c.Resources.Requests.Cpu())
		mem.Add(*c.Resources.Requests.Memory())
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			cpu.Add(*c.Resources.Requests.Cpu()) // a native sidecar runs beside the containers
			mem.Add(*c.Resources.Requests.Memory())
			continue
		}
		if r := c.Resources.Requests.Cpu(); r.Cmp(cpu) > 0 {
			cpu = r.DeepCopy()
		}
		if r := c.Resources.Requests.Memory(); r.Cmp(mem) > 0 {
			mem = r.DeepCopy()
		}
	}
	return cpu, mem
}
