package bench

import (
	"syscall"
	"unsafe"
)

// hugeTable is a table of n uint64s in fresh memory of the process's own
// (mmap), advised into 2 MB pages (MADV_HUGEPAGE) before it is first
// touched, and its release; ok is false where that cannot be asked. The Go
// heap will not do: a table there may reuse pages already touched, in 4 KB
// pages.
func hugeTable(n int) (tab []uint64, release func(), ok bool) {
	const huge = 2 << 20
	size := n*8 + huge
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, false
	}
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(mem))) & (huge - 1)) // to the first 2 MB boundary
	body := mem[skip : skip+n*8]
	if syscall.Madvise(body, 14 /* MADV_HUGEPAGE */) != nil {
		syscall.Munmap(mem)
		return nil, nil, false
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(body))), n), func() { syscall.Munmap(mem) }, true
}
