package load

// CPUSeconds is a process's user+system CPU time so far, from
// /proc/PID/stat.
func CPUSeconds(pid int) (float64, error) { return cpuSeconds(pid) }
