// Package web holds the pages the edge embeds: the demo page at /, the
// operator dashboard at /ops and Epic's Pixel Streaming player at
// /pxstream/ (a committed bundle, see pxplayer/), plus the browser-test
// scripts that drive them in headless Chromium (web/browsertest, run by
// the edge's tests).
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

//go:embed pxplayer/index.html pxplayer/player.js pxplayer/THIRD_PARTY_LICENSES.txt
var playerFS embed.FS

// Player is the Pixel Streaming player page's file tree: index.html,
// player.js (Epic's player UI, bundled by scripts/build-player.sh) and
// THIRD_PARTY_LICENSES.txt.
func Player() fs.FS { return sub(playerFS, "pxplayer") }

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
