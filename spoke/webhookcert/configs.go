package webhookcert

import (
	"context"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Kinds of webhook configuration whose caBundle a Manager keeps.
const (
	kindValidating = "ValidatingWebhookConfiguration"
	kindMutating   = "MutatingWebhookConfiguration"
)

// webhookConfig is one webhook configuration the Manager keeps, watched
// by name. Set up by Run; used only by its loop.
type webhookConfig struct {
	kind, name string
	inf        cache.SharedIndexInformer
}

// informer returns the informer of the configuration kind called name
// from f (which must be limited to that name).
func configInformer(f informers.SharedInformerFactory, kind string) cache.SharedIndexInformer {
	if kind == kindMutating {
		return f.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()
	}
	return f.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer()
}

// configView is what the Manager reads of either kind: its annotations
// and every webhook's caBundle.
type configView struct {
	annotations map[string]string
	bundles     [][]byte
}

// get returns the configuration's view from the informer, if it exists.
func (c *webhookConfig) get() (obj any, v configView, exists bool) {
	obj, exists, _ = c.inf.GetStore().GetByKey(c.name)
	if !exists {
		return nil, v, false
	}
	switch o := obj.(type) {
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		v.annotations = o.Annotations
		for _, w := range o.Webhooks {
			v.bundles = append(v.bundles, w.ClientConfig.CABundle)
		}
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		v.annotations = o.Annotations
		for _, w := range o.Webhooks {
			v.bundles = append(v.bundles, w.ClientConfig.CABundle)
		}
	}
	return obj, v, true
}

// generation is the CA generation the view's annotation names (0: none).
func (v configView) generation() int {
	n, _ := strconv.Atoi(v.annotations[GenerationAnnotation])
	return n
}

// updateBundle writes pemBundle into every webhook of obj (a copy of it)
// with gen in the annotation, and returns how many webhooks it holds.
func updateBundle(ctx context.Context, client kubernetes.Interface, obj any, pemBundle []byte, gen int) (int, error) {
	setAnnotation := func(m *metav1.ObjectMeta) {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[GenerationAnnotation] = strconv.Itoa(gen)
	}
	opts := metav1.UpdateOptions{FieldManager: "nave-spoke"}
	switch o := obj.(type) {
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		upd := o.DeepCopy()
		for i := range upd.Webhooks {
			upd.Webhooks[i].ClientConfig.CABundle = pemBundle
		}
		setAnnotation(&upd.ObjectMeta)
		_, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, upd, opts)
		return len(upd.Webhooks), err
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		upd := o.DeepCopy()
		for i := range upd.Webhooks {
			upd.Webhooks[i].ClientConfig.CABundle = pemBundle
		}
		setAnnotation(&upd.ObjectMeta)
		_, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, upd, opts)
		return len(upd.Webhooks), err
	}
	return 0, nil
}
