//go:build linux

package execpages

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// residentKB sums the Rss of the executable's mappings in
// /proc/self/smaps, by permissions.
func residentKB(t *testing.T) map[string]int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	perms := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4:
			perms = ""
			if len(f) >= 6 && f[5] == exe {
				perms = f[1]
			}
		case perms != "" && f[0] == "Rss:":
			n, _ := strconv.Atoi(f[1])
			out[perms] += n
		}
	}
	return out
}

// TestReleaseLeavesFewerPagesResidentAndTheProcessWhole: the read-only
// mappings hold fewer resident pages after Release, and the process runs
// on (its code and data mapped back as used).
func TestReleaseLeavesFewerPagesResidentAndTheProcessWhole(t *testing.T) {
	before := residentKB(t)
	n, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := residentKB(t)
	t.Logf("advised %d bytes; resident KiB before %v, after %v", n, before, after)
	if n <= 0 {
		t.Fatalf("advised %d bytes, want the executable's read-only mappings", n)
	}
	if ro := func(m map[string]int) int { return m["r-xp"] + m["r--p"] }; ro(after) >= ro(before) {
		t.Errorf("read-only pages resident: %d KiB after, %d before", ro(after), ro(before))
	}
	if after["rw-p"] < before["rw-p"] {
		t.Errorf("the writable mapping lost pages: %d KiB after, %d before", after["rw-p"], before["rw-p"])
	}
	if got := strconv.Itoa(42) + strings.Repeat("!", 2); got != "42!!" {
		t.Fatalf("the process is not whole: %q", got)
	}
}

func TestReadOnlyMappingsAreTheExecutablesPrivateUnwritableOnes(t *testing.T) {
	maps := []byte(`00400000-0269a000 r-xp 00000000 fe:00 11 /bin/spoke
0269a000-0531c000 r--p 0229a000 fe:00 11 /bin/spoke
0531c000-053f0000 rw-p 04f1c000 fe:00 11 /bin/spoke
053f0000-05400000 r--s 00000000 fe:00 11 /bin/spoke
05400000-05500000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r-xp 00000000 fe:00 12 /usr/lib/libc.so.6
7f0000002000-7f0000003000 r--p 00000000 fe:00 13 /bin/spoke (deleted)
`)
	got := readOnlyMappings(maps, "/bin/spoke")
	want := []mapping{{0x400000, 0x269a000}, {0x269a000, 0x531c000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("mappings = %#v, want %#v", got, want)
	}
}

// TestReadOnlyMappingsSkipWrittenPages: a read-only mapping holding a page
// the process wrote (RELRO after the dynamic loader's relocations) is not
// released: its private copy would be lost for the file's bytes.
func TestReadOnlyMappingsSkipWrittenPages(t *testing.T) {
	smaps := []byte(`00400000-0269a000 r-xp 00000000 fe:00 11 /bin/spoke
Size:              35432 kB
Rss:               20000 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw
0269a000-0269b000 r--p 0229a000 fe:00 11 /bin/spoke
Size:                  4 kB
Rss:                   4 kB
Anonymous:             4 kB
VmFlags: rd mr mw me dw ac
0269b000-0531c000 r--p 0229b000 fe:00 11 /bin/spoke
Size:              45000 kB
Anonymous:             0 kB
0531c000-053f0000 rw-p 04f1c000 fe:00 11 /bin/spoke
Anonymous:           100 kB
`)
	got := readOnlyMappings(smaps, "/bin/spoke")
	want := []mapping{{0x400000, 0x269a000}, {0x269b000, 0x531c000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("mappings = %#v, want %#v (the written RELRO page left alone)", got, want)
	}
}

// TestReleaseInAPositionIndependentBuild runs the release test in a PIE
// build of this package's tests, whose RELRO pages the dynamic loader
// wrote: released with the rest, they came back unrelocated and the
// process died of a segmentation fault.
func TestReleaseInAPositionIndependentBuild(t *testing.T) {
	// go test runs this, so the go tool is on PATH: without it the test
	// fails rather than proving nothing.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go tool to build with: %v", err)
	}
	cmd := exec.CommandContext(t.Context(), goTool, "test", "-count=1", "-buildmode=pie",
		"-run", "^TestReleaseLeavesFewerPagesResidentAndTheProcessWhole$", ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the release test in a PIE build: %v\n%s", err, out)
	}
}
