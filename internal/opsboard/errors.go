package opsboard

import "errors"

// ErrNoBoard: fleet figures were asked of a dashboard without a fleet board.
var ErrNoBoard = errors.New("opsboard: no fleet board")
