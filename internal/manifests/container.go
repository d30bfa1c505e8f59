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

// Container is what a workload (a Deployment or a StatefulSet) starts one of its containers
// with, read from rendered manifests: which binary (the image's repository base name: make
// images makes the binary its entrypoint), the arguments, the environment and the volumes
// mounted. It is immutable once ContainerOf returns it.
type Container struct {
	// Kind is the workload's kind (WorkloadKinds), Workload its name, ServiceAccount its pod's
	// service account.
	Kind, Workload, ServiceAccount string
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

// WorkloadKinds are the kinds of workload ContainerOf and FindWorkload read.
var WorkloadKinds = []string{"Deployment", "StatefulSet"}

// Workload is what a Deployment or a StatefulSet asks for: its pods' template and how many.
// Nothing modifies it once FindWorkload returns it; concurrent reads are safe.
type Workload struct {
	// Kind is Deployment or StatefulSet.
	Kind string
	// Replicas is spec.replicas (1 when unset, as the API server defaults it).
	Replicas int
	// Template is the pod template as rendered.
	Template corev1.PodTemplateSpec
	// Object is the object as rendered.
	Object *unstructured.Unstructured
}

// FindWorkload returns the Deployment or StatefulSet namespace/name among objs, or an error
// when there is none.
func FindWorkload(objs []*unstructured.Unstructured, namespace, name string) (*Workload, error) {
	for _, kind := range WorkloadKinds {
		u := Find(objs, kind, namespace, name)
		if u == nil {
			continue
		}
		w := &Workload{Kind: kind, Replicas: 1, Object: u}
		var replicas *int32
		switch kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
				return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, err)
			}
			w.Template, replicas = d.Spec.Template, d.Spec.Replicas
		case "StatefulSet":
			var s appsv1.StatefulSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s); err != nil {
				return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, err)
			}
			w.Template, replicas = s.Spec.Template, s.Spec.Replicas
		}
		if replicas != nil {
			w.Replicas = int(*replicas)
		}
		return w, nil
	}
	return nil, fmt.Errorf("no Deployment or StatefulSet %s/%s", namespace, name)
}

// ContainerOf reads container of workload namespace/name (a Deployment or a StatefulSet) from
// objs. Environment values from a ConfigMap key, a container's resources or a field of the pod
// (PodFields: the values a test process stands in for) are resolved; any other valueFrom (a
// Secret) is an error naming it, so that a test starting the binary cannot silently miss a
// variable the workload sets.
func ContainerOf(objs []*unstructured.Unstructured, namespace, name, container string) (*Container, error) {
	w, err := FindWorkload(objs, namespace, name)
	if err != nil {
		return nil, err
	}
	pod := &w.Template.Spec
	var spec *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == container {
			spec = &pod.Containers[i]
		}
	}
	if spec == nil {
		return nil, fmt.Errorf("%s %s/%s has no container %s", w.Kind, namespace, name, container)
	}
	c := &Container{Kind: w.Kind, Workload: name, ServiceAccount: pod.ServiceAccountName, Image: spec.Image,
		Binary: imageBinary(spec.Image), Command: spec.Command, Args: spec.Args, Spec: *spec, Pod: *pod,
		Mounts: map[string]Mount{}}
	where := fmt.Sprintf("%s %s/%s container %s", w.Kind, namespace, name, container)
	for _, e := range spec.Env {
		v, err := envValue(objs, namespace, name, pod, spec, e)
		if err != nil {
			return nil, fmt.Errorf("%s: env %s: %w", where, e.Name, err)
		}
		c.Env = append(c.Env, e.Name+"="+v)
	}
	if len(spec.EnvFrom) > 0 {
		return nil, fmt.Errorf("%s: envFrom is not read here; add it to manifests.ContainerOf", where)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
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
// workload namespace/name: its name is the workload's with a "-0" suffix (a StatefulSet's
// first pod; a Deployment's pods have other suffixes, which nothing reads), and its addresses
// are loopback.
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
