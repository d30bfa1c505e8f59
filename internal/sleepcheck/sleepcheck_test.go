package main

import (
	"slices"
	"strings"
	"testing"
)

func TestSleepsOutsideABubble(t *testing.T) {
	src := `package p

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestA(t *testing.T) {
	SLEEP(time.Second)
	synctest.Test(t, func(t *testing.T) {
		SLEEP(time.Second)
		go func() { SLEEP(time.Second) }()
	})
	f := func() { SLEEP(time.Second) }
	f()
}
`
	got, err := sleeps("p_test.go", source(src))
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{10, 15}; !slices.Equal(got, want) {
		t.Errorf("sleeps on lines %v, want %v (the bubble's two are fake-clock advances)", got, want)
	}
}

func TestSleepsWithRenamedImports(t *testing.T) {
	src := `package p

import (
	"testing"
	st "testing/synctest"
	tm "time"
)

func TestA(t *testing.T) {
	st.Test(t, func(t *testing.T) { TMSLEEP(1) })
	TMSLEEP(1)
}
`
	got, err := sleeps("p_test.go", source(src))
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{11}; !slices.Equal(got, want) {
		t.Errorf("sleeps on lines %v, want %v", got, want)
	}
}

// source spells the sleeps of src (SLEEP, TMSLEEP) only here, so that a
// search of the tree for sleeps in tests does not find these.
func source(src string) []byte {
	return []byte(strings.NewReplacer("TMSLEEP", "tm."+"Sleep", "SLEEP", "time."+"Sleep").Replace(src))
}

func TestCompare(t *testing.T) {
	allowed, err := parseAllowlist("# why\na_test.go: a sampling rate\n\nb_test.go: a window\nb_test.go: another\n")
	if err != nil {
		t.Fatal(err)
	}
	bad, stale := compare(map[string][]int{"a_test.go": {3, 9}, "b_test.go": {4}}, allowed, "allow.txt")
	if len(bad) != 1 || !strings.Contains(bad[0], "a_test.go:3, a_test.go:9") {
		t.Errorf("compare: bad %q, want a_test.go's two sleeps", bad)
	}
	if len(stale) != 1 || !strings.Contains(stale[0], "b_test.go: allow.txt allows 2") {
		t.Errorf("compare: stale %q, want b_test.go's extra line", stale)
	}
	if _, err := parseAllowlist("c_test.go\n"); err == nil {
		t.Error("a line without a reason was accepted")
	}
}
