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

// Demo is the demo page's file tree (index.html at its root).
func Demo() fs.FS {
	sub, err := fs.Sub(demoFS, "demo")
	if err != nil {
		// fs.Sub fails only on an invalid path; "demo" is a constant.
		return demoFS
	}
	return sub
}
