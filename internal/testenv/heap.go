package testenv

import "runtime"

// LiveHeap returns the bytes of live heap after two collections: the
// first frees what became garbage, the second what the first's finalizers
// and sweeps released. Tests divide the difference of two readings by what
// they added in between.
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
