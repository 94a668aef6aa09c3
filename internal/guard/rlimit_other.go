//go:build !unix

package guard

func nofile() uint64 { return 0 }
