package e2e

import "os"

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }
