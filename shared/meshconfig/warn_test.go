package meshconfig

import (
	"strings"
	"testing"
)

func warnObject(t *testing.T, doc string) *Object {
	t.Helper()
	objs, errs := DecodeYAML([]byte(doc), "test.yaml")
	if len(errs) > 0 || len(objs) != 1 {
		t.Fatalf("decoding %q: %v", doc, errs)
	}
	return objs[0]
}

func TestWarningsDanglingSubsets(t *testing.T) {
	rules := IndexDestinationRules([]*Object{
		warnObject(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: shop}\n"+
			"spec: {host: reviews, subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]}"),
		warnObject(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: plain, namespace: shop}\n"+
			"spec: {host: ratings.shop.svc.example.org}"),
		warnObject(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: secret-ratings, namespace: other}\n"+
			"spec: {host: ratings, subsets: [{name: internal, labels: {version: internal}}]}"),
		warnObject(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings-local, namespace: shop}\n"+
			"spec: {host: ratings.other.svc.example.org}"),
		warnObject(t, "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: shop}\n"+
			"spec: {servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}"),
	}, "example.org")
	if rules.Len() != 3 {
		t.Fatalf("%d hosts indexed, want 3", rules.Len())
	}
	tests := []struct {
		name string
		spec string
		want []string // "field|reason fragment"
	}{
		{"defined subsets", "hosts: [reviews]\nhttp: [{route: [{destination: {host: reviews, subset: v1}, weight: 50}, {destination: {host: reviews.shop.svc.example.org, subset: v2}, weight: 50}]}]", nil},
		{"no subset", "hosts: [reviews]\nhttp: [{route: [{destination: {host: nowhere}}]}]", nil},
		{"undefined subset", "hosts: [reviews]\nhttp: [{route: [{destination: {host: reviews, subset: v3}}]}]",
			[]string{`spec.http[0].route[0].destination.subset|subset "v3" is not defined by the DestinationRules of reviews.shop.svc.example.org in this cluster (shop/reviews: subsets v1, v2)`}},
		{"host without rules", "hosts: [reviews]\nhttp: [{route: [{destination: {host: details, subset: v1}}]}]",
			[]string{`spec.http[0].route[0].destination.subset|no DestinationRule in this cluster is for host details.shop.svc.example.org`}},
		{"rule without subsets", "hosts: [reviews]\ntcp: [{route: [{destination: {host: ratings, subset: v1}}]}]",
			[]string{`spec.tcp[0].route[0].destination.subset|(shop/plain: no subsets)`}},
		{"rules of other namespaces are not named", "hosts: [reviews]\nhttp: [{route: [{destination: {host: ratings.other.svc.example.org, subset: v1}}]}]",
			[]string{`spec.http[0].route[0].destination.subset|subset "v1" is not defined by the DestinationRules of ratings.other.svc.example.org in this cluster (shop/ratings-local: no subsets; 1 in other namespaces)`}},
		{"mirrors and tls", "hosts: [reviews]\nhttp: [{route: [{destination: {host: reviews}}], mirror: {host: reviews, subset: m}, mirrors: [{destination: {host: reviews, subset: v1}}, {destination: {host: reviews, subset: w}}]}]\n" +
			"tls: [{match: [{sniHosts: [reviews]}], route: [{destination: {host: reviews, subset: t}}]}]",
			[]string{`spec.http[0].mirror.subset|"m"`, `spec.http[0].mirrors[1].destination.subset|"w"`, `spec.tls[0].route[0].destination.subset|"t"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := warnObject(t, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs, namespace: shop}\nspec:\n"+indent(tc.spec))
			got := Warnings(o, rules)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %v, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				field, reason, _ := strings.Cut(w, "|")
				if got[i].Field != field || !strings.Contains(got[i].Reason, reason) {
					t.Errorf("warning %d is %q, want field %s and %q", i, got[i], field, reason)
				}
			}
		})
	}
}

func TestWarningsOnlyForVirtualServices(t *testing.T) {
	dr := warnObject(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: shop}\nspec: {host: reviews}")
	if w := Warnings(dr, IndexDestinationRules(nil, DefaultDomainSuffix)); w != nil {
		t.Errorf("DestinationRule warned: %v", w)
	}
	vs := warnObject(t, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs, namespace: shop}\nspec: {hosts: [a], http: [{route: [{destination: {host: a, subset: x}}]}]}")
	if w := Warnings(vs, nil); w != nil {
		t.Errorf("warned without an index: %v", w)
	}
}

func TestWarningsAreBounded(t *testing.T) {
	routes := strings.Repeat("{route: [{destination: {host: a, subset: x}}]}, ", 29) + "{route: [{destination: {host: a, subset: x}}]}"
	o := warnObject(t, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs, namespace: shop}\nspec:\n"+
		indent("hosts: [a]\ntcp: ["+routes+"]"))
	if got := Warnings(o, IndexDestinationRules(nil, DefaultDomainSuffix)); len(got) != maxWarnings {
		t.Errorf("%d warnings, want %d", len(got), maxWarnings)
	}
}
