// Package execpages drops the process's own executable's read-only pages
// (its code, constants, type data and function tables) from its resident
// set, so that what stays resident is what the process goes on to use.
//
// A Go binary's package initializers, and everything else run once at
// start, fault in their pages of the executable, and the kernel maps each
// fault's neighbours with it (up to 64 KiB): a spoke linking ~1,100
// packages holds ~50 MiB of its 120 MB binary resident right after start,
// about half of it never touched again. Those pages are clean and backed
// by the file: unmapping them (madvise MADV_DONTNEED on a private mapping
// that was never written) loses nothing; a page used later is mapped again
// from the page cache on its next access (a minor fault), or read from the
// file if the kernel has reclaimed it meanwhile. Writable mappings (the
// binary's initialized data) are never touched: dropping their pages would
// discard what the process wrote.
package execpages
