//go:build linux

package execpages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Release unmaps the resident pages of the executable's read-only mappings
// and returns how many bytes of address space it advised. It is safe to
// call at any time, from any goroutine: code running meanwhile faults its
// pages back in.
func Release() (int64, error) {
	maps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("release executable pages: %w", err)
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("release executable pages: %w", err)
	}
	var total int64
	for _, m := range readOnlyMappings(maps, exe) {
		// Without huge pages, a page used again is mapped back alone (and its
		// neighbours the kernel maps around a fault), not the 2 MiB around it;
		// a kernel that cannot say so still releases.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_NOHUGEPAGE)
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return total, fmt.Errorf("release executable pages: madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		total += int64(m.end - m.start)
	}
	return total, nil
}

// mapping is one address range of /proc/self/maps.
type mapping struct{ start, end uintptr }

// readOnlyMappings returns the mappings of path in smaps (the text of
// /proc/self/smaps, or of /proc/self/maps, its header lines alone) that
// are private, not writable, and hold no page the process wrote. A
// written page of a read-only mapping is anonymous (a private copy): the
// relocations the dynamic loader applies before protecting RELRO (a
// position-independent or dynamically linked build), or a debugger's
// breakpoint. Unmapping it would bring the file's unrelocated bytes back,
// so such a mapping is left alone.
func readOnlyMappings(smaps []byte, path string) []mapping {
	var out []mapping
	candidate := false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Bytes()
		f := bytes.Fields(line)
		if len(f) >= 2 && bytes.Equal(f[0], []byte("Anonymous:")) {
			if candidate && !bytes.Equal(f[1], []byte("0")) {
				out = out[:len(out)-1]
			}
			candidate = false
			continue
		}
		if len(f) == 0 || bytes.HasSuffix(f[0], []byte(":")) {
			continue // another field of the mapping above
		}
		candidate = false
		// address perms offset dev inode pathname (which may hold spaces,
		// such as " (deleted)" after a replaced binary's, as
		// /proc/self/exe then says too)
		if len(f) < 6 || string(bytes.TrimSpace(line[bytes.Index(line, f[5]):])) != path {
			continue
		}
		perms := f[1]
		if len(perms) != 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, mapping{uintptr(start), uintptr(end)})
		candidate = true
	}
	return out
}
