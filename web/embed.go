// Package web holds the pages the edge embeds: the demo page at / and the
// operator dashboard at /ops, plus the browser-test scripts that drive them
// in headless Chromium (web/browsertest, run by the edge's tests).
package web

import (
	"embed"
	"io/fs"
)

//go:embed demo
var demoFS embed.FS

//go:embed ops
var opsFS embed.FS

//go:embed queue
var queueFS embed.FS

// Demo is the demo page's file tree (index.html at its root).
func Demo() fs.FS { return sub(demoFS, "demo") }

// Queue is the waiting-room page's file tree (index.html at its root).
func Queue() fs.FS { return sub(queueFS, "queue") }

// Ops is the operator dashboard's file tree (index.html at its root).
func Ops() fs.FS { return sub(opsFS, "ops") }

func sub(f embed.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		// fs.Sub fails only on an invalid path; dir is a constant.
		return f
	}
	return s
}
