package egbeclient

import (
	"context"
	"fmt"

	"github.com/oshun/egbe-edge/codec"
)

// HelloError is a handshake the edge refused with an Error envelope.
type HelloError struct{ Err *codec.Error }

func (e *HelloError) Error() string {
	return fmt.Sprintf("egbeclient: hello refused: %s: %s", e.Err.GetCode(), e.Err.GetMessage())
}

// Hello sends h and waits for the ServerHello (or the Error refusing it).
// Envelopes that arrive before the hello (none should) are discarded.
func (c *Conn) Hello(ctx context.Context, h *codec.ClientHello) (*codec.ServerHello, error) {
	if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}}, false); err != nil {
		return nil, err
	}
	for {
		env, err := c.Recv(ctx)
		if err != nil {
			return nil, err
		}
		switch m := env.Msg.(type) {
		case *codec.ServerEnvelope_Hello:
			if m.Hello.GetAcceptance() == codec.Acceptance_REJECTED {
				// The Error with the reason follows.
				if next, err := c.Recv(ctx); err == nil && next.GetError() != nil {
					return m.Hello, &HelloError{Err: next.GetError()}
				}
				return m.Hello, &HelloError{Err: &codec.Error{Code: "rejected"}}
			}
			return m.Hello, nil
		case *codec.ServerEnvelope_Error:
			return nil, &HelloError{Err: m.Error}
		}
	}
}
