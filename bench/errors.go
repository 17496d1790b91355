package bench

import (
	"errors"
	"flag"
	"fmt"
)

// ErrUsage: a scenario's command line did not parse (the flag set has
// already printed why, with the scenario's flags). With --help it also
// wraps flag.ErrHelp: the caller decides the exit code either way.
var ErrUsage = errors.New("bench: usage")

// parseFlags parses a scenario's command line; a flag set built with
// flag.ContinueOnError returns its error here instead of exiting the
// process.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUsage, fs.Name(), err)
	}
	return nil
}
