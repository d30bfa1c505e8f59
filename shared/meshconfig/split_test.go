package meshconfig

import (
	"reflect"
	"testing"
)

func TestSplitDocuments(t *testing.T) {
	type doc struct {
		Index, Line int
		Data        string
	}
	tests := []struct {
		name, in string
		want     []doc
	}{
		{"single", "a: 1\n", []doc{{0, 1, "a: 1\n"}}},
		{"no trailing newline", "a: 1", []doc{{0, 1, "a: 1"}}},
		{"two", "a: 1\n---\nb: 2\n", []doc{{0, 1, "a: 1\n"}, {1, 2, "   \nb: 2\n"}}},
		{"leading marker", "---\na: 1\n", []doc{{0, 1, "   \na: 1\n"}}},
		{"comment preamble is not a document", "# hi\n\n---\na: 1\n", []doc{{0, 3, "   \na: 1\n"}}},
		{"empty explicit documents keep their index", "---\n---\na: 1\n", []doc{{0, 1, "   \n"}, {1, 2, "   \na: 1\n"}}},
		{"content on the marker line", "--- {a: 1}\n", []doc{{0, 1, "    {a: 1}\n"}}},
		{"marker comment", "a: 1\n--- # next\nb: 2\n", []doc{{0, 1, "a: 1\n"}, {1, 2, "    # next\nb: 2\n"}}},
		{"CRLF", "a: 1\r\n---\r\nb: 2\r\n", []doc{{0, 1, "a: 1\r\n"}, {1, 2, "   \r\nb: 2\r\n"}}},
		{"not a marker", "a: ---x\n----\n", []doc{{0, 1, "a: ---x\n----\n"}}},
		{"document end", "a: 1\n...\n# trailing\n", []doc{{0, 1, "a: 1\n"}}},
		{"content after document end", "a: 1\n...\nb: 2\n", []doc{{0, 1, "a: 1\n"}, {1, 3, "b: 2\n"}}},
		{"directive", "%YAML 1.1\n---\na: 1\n", []doc{{0, 2, "   \na: 1\n"}}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []doc
			for _, d := range splitDocuments([]byte(tt.in)) {
				got = append(got, doc{d.index, d.line, string(d.data)})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
