package manifests

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Container is what a Deployment starts one of its containers with, read from rendered
// manifests: which binary (the image's repository base name: make images makes the binary its
// entrypoint), the arguments, the environment and the volumes mounted.
type Container struct {
	// Deployment is the Deployment's name, ServiceAccount its pod's service account.
	Deployment, ServiceAccount string
	// Binary is the base name of the image's repository (registry.example.com/nave/nave-hub:dev
	// gives nave-hub); Image the whole reference.
	Binary, Image string
	// Command is the container's command (empty: the image's entrypoint), Args its arguments.
	Command, Args []string
	// Env is the environment in order, as NAME=VALUE, every valueFrom resolved.
	Env []string
	// Mounts are the volume mounts, by mount path.
	Mounts map[string]Mount
	// Spec is the container as rendered.
	Spec corev1.Container
	// Pod is the pod template's spec as rendered.
	Pod corev1.PodSpec
}

// Mount is one volume mounted into a Container.
type Mount struct {
	// Volume is the volume's name; Kind is configMap, secret, emptyDir or persistentVolumeClaim.
	Volume, Kind string
	// Files are the files of a configMap volume, by name (every key, or the items listed).
	Files map[string][]byte
	// Source names the ConfigMap, Secret or claim.
	Source string
	// ReadOnly is the mount's readOnly.
	ReadOnly bool
}

// ContainerOf reads container of Deployment namespace/name from objs. Environment values from
// a ConfigMap key, a container's resources or a field of the pod (PodFields: the values a test
// process stands in for) are resolved; any other valueFrom (a Secret) is an error naming it, so
// that a test starting the binary cannot silently miss a variable the Deployment sets.
func ContainerOf(objs []*unstructured.Unstructured, namespace, name, container string) (*Container, error) {
	u := Find(objs, "Deployment", namespace, name)
	if u == nil {
		return nil, fmt.Errorf("no Deployment %s/%s", namespace, name)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		return nil, fmt.Errorf("deployment %s/%s: %w", namespace, name, err)
	}
	var spec *corev1.Container
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == container {
			spec = &d.Spec.Template.Spec.Containers[i]
		}
	}
	if spec == nil {
		return nil, fmt.Errorf("deployment %s/%s has no container %s", namespace, name, container)
	}
	c := &Container{Deployment: name, ServiceAccount: d.Spec.Template.Spec.ServiceAccountName, Image: spec.Image,
		Binary: imageBinary(spec.Image), Command: spec.Command, Args: spec.Args, Spec: *spec, Pod: d.Spec.Template.Spec,
		Mounts: map[string]Mount{}}
	where := fmt.Sprintf("Deployment %s/%s container %s", namespace, name, container)
	for _, e := range spec.Env {
		v, err := envValue(objs, namespace, name, &d.Spec.Template.Spec, spec, e)
		if err != nil {
			return nil, fmt.Errorf("%s: env %s: %w", where, e.Name, err)
		}
		c.Env = append(c.Env, e.Name+"="+v)
	}
	if len(spec.EnvFrom) > 0 {
		return nil, fmt.Errorf("%s: envFrom is not read here; add it to manifests.ContainerOf", where)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, vm := range spec.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("%s: mount %s: no volume %s", where, vm.MountPath, vm.Name)
		}
		if vm.SubPath != "" {
			return nil, fmt.Errorf("%s: mount %s: subPath is not read here", where, vm.MountPath)
		}
		m := Mount{Volume: vm.Name, ReadOnly: vm.ReadOnly}
		switch {
		case v.ConfigMap != nil:
			m.Kind, m.Source = "configMap", v.ConfigMap.Name
			files, err := configMapFiles(objs, namespace, v.ConfigMap)
			if err != nil {
				return nil, fmt.Errorf("%s: mount %s: %w", where, vm.MountPath, err)
			}
			m.Files = files
		case v.Secret != nil:
			m.Kind, m.Source = "secret", v.Secret.SecretName
		case v.EmptyDir != nil:
			m.Kind = "emptyDir"
		case v.PersistentVolumeClaim != nil:
			m.Kind, m.Source = "persistentVolumeClaim", v.PersistentVolumeClaim.ClaimName
		default:
			return nil, fmt.Errorf("%s: mount %s: volume %s is of a kind not read here", where, vm.MountPath, vm.Name)
		}
		c.Mounts[vm.MountPath] = m
	}
	return c, nil
}

// MountPaths are c's mount paths, longest first (the first that is a prefix of a path is the
// mount that path is on).
func (c *Container) MountPaths() []string {
	var ps []string
	for p := range c.Mounts {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return len(ps[i]) > len(ps[j]) || len(ps[i]) == len(ps[j]) && ps[i] < ps[j] })
	return ps
}

func imageBinary(image string) string {
	ref := image
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	base := path.Base(ref)
	if i := strings.Index(base, ":"); i >= 0 {
		base = base[:i]
	}
	return base
}

// PodFields are the downward API's pod fields for a process standing in for a pod of
// Deployment namespace/name: its name is the Deployment's with a "-0" suffix, and its
// addresses are loopback.
func PodFields(namespace, name string, pod *corev1.PodSpec) map[string]string {
	return map[string]string{
		"metadata.name":           name + "-0",
		"metadata.namespace":      namespace,
		"spec.serviceAccountName": pod.ServiceAccountName,
		"spec.nodeName":           "node-0",
		"status.podIP":            "127.0.0.1",
		"status.hostIP":           "127.0.0.1",
	}
}

func envValue(objs []*unstructured.Unstructured, namespace, name string, pod *corev1.PodSpec, spec *corev1.Container, e corev1.EnvVar) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	switch vf := e.ValueFrom; {
	case vf.FieldRef != nil:
		v, ok := PodFields(namespace, name, pod)[vf.FieldRef.FieldPath]
		if !ok {
			return "", fmt.Errorf("fieldRef %s is not read here; add it to manifests.PodFields", vf.FieldRef.FieldPath)
		}
		return v, nil
	case vf.ResourceFieldRef != nil:
		return resourceValue(spec, vf.ResourceFieldRef)
	case vf.ConfigMapKeyRef != nil:
		files, err := configMapFiles(objs, namespace, &corev1.ConfigMapVolumeSource{LocalObjectReference: vf.ConfigMapKeyRef.LocalObjectReference})
		if err != nil {
			return "", err
		}
		v, ok := files[vf.ConfigMapKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("ConfigMap %s has no key %s", vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key)
		}
		return string(v), nil
	default:
		return "", fmt.Errorf("valueFrom other than fieldRef, resourceFieldRef or configMapKeyRef is not read here; add it to manifests.ContainerOf")
	}
}

// resourceValue is what the kubelet gives a resourceFieldRef: the container's limit (or request)
// divided by the divisor (default 1), rounded up.
func resourceValue(spec *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != spec.Name {
		return "", fmt.Errorf("resourceFieldRef of another container (%s) is not read here", ref.ContainerName)
	}
	kind, res, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %q is not limits.X or requests.X", ref.Resource)
	}
	var list corev1.ResourceList
	switch kind {
	case "limits":
		list = spec.Resources.Limits
	case "requests":
		list = spec.Resources.Requests
	default:
		return "", fmt.Errorf("resourceFieldRef %q is not limits.X or requests.X", ref.Resource)
	}
	q, ok := list[corev1.ResourceName(res)]
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %s: the container sets no %s (the kubelet would give the node's allocatable)", ref.Resource, ref.Resource)
	}
	divisor := resource.MustParse("1")
	if !ref.Divisor.IsZero() {
		divisor = ref.Divisor
	}
	if res == "cpu" {
		m := (q.MilliValue() + divisor.MilliValue() - 1) / divisor.MilliValue()
		return strconv.FormatInt(m, 10), nil
	}
	v := (q.Value() + divisor.Value() - 1) / divisor.Value()
	return strconv.FormatInt(v, 10), nil
}

func configMapFiles(objs []*unstructured.Unstructured, namespace string, src *corev1.ConfigMapVolumeSource) (map[string][]byte, error) {
	u := Find(objs, "ConfigMap", namespace, src.Name)
	if u == nil {
		return nil, fmt.Errorf("no ConfigMap %s/%s in the manifests", namespace, src.Name)
	}
	var cm corev1.ConfigMap
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cm); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", namespace, src.Name, err)
	}
	all := map[string][]byte{}
	for k, v := range cm.Data {
		all[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		all[k] = v
	}
	if len(src.Items) == 0 {
		return all, nil
	}
	out := map[string][]byte{}
	for _, it := range src.Items {
		v, ok := all[it.Key]
		if !ok {
			return nil, fmt.Errorf("ConfigMap %s/%s has no key %s", namespace, src.Name, it.Key)
		}
		out[it.Path] = v
	}
	return out, nil
}
