package wsframe

import "errors"

// ErrProtocol: the peer broke RFC 6455 (wrapped by *ProtocolError, which
// carries the close code that answers it).
var ErrProtocol = errors.New("wsframe: websocket protocol error")
