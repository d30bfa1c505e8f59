package inject

import (
	"encoding/json"
	"strconv"
	"strings"
)

// op is one RFC 6902 JSON patch operation; the injector only adds.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch builds the additions to a pod as JSON patch operations, applied
// in order by the API server.
type patch struct{ ops []op }

func (p *patch) add(path string, value any) {
	p.ops = append(p.ops, op{Op: "add", Path: path, Value: value})
}

// insert puts values at the front of the list at path, which holds n
// items (n == 0: the field may be absent, so it is set whole).
func insert[T any](p *patch, path string, n int, values []T) {
	if len(values) == 0 {
		return
	}
	if n == 0 {
		p.add(path, values)
		return
	}
	for i, v := range values {
		p.add(path+"/"+strconv.Itoa(i), v)
	}
}

// appendTo appends values to the list at path, which holds n items.
func appendTo[T any](p *patch, path string, n int, values []T) {
	if len(values) == 0 {
		return
	}
	if n == 0 {
		p.add(path, values)
		return
	}
	for _, v := range values {
		p.add(path+"/-", v)
	}
}

// setKeys adds keys to the map at path, which is absent when has is
// false. The keys must be new.
func setKeys(p *patch, path string, has bool, keys map[string]string, order []string) {
	if len(order) == 0 {
		return
	}
	if !has {
		p.add(path, keys)
		return
	}
	for _, k := range order {
		p.add(path+"/"+pointerEscape(k), keys[k])
	}
}

// pointerEscape escapes a key for a JSON pointer (RFC 6901).
func pointerEscape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func (p *patch) marshal() ([]byte, error) { return json.Marshal(p.ops) }
