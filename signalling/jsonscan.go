package signalling

// A single-pass JSON validator for relayed frames. Decode used to run
// encoding/json.Valid over every frame and then walk it again to split
// the top-level members; the offer's SDP (tens of KiB of one JSON string)
// made that the broker's largest user-space cost. validValue checks a
// value and returns where it ends, so Decode validates and splits in the
// same pass. It accepts exactly what json.Valid accepts (RFC 8259; bytes
// >= 0x20 in strings are not checked for UTF-8, as json.Valid does not;
// at most 10,000 nested arrays and objects), which FuzzValidValue checks
// against json.Valid.

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// strSpecial marks the bytes a string scan must stop at.
var strSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// wsAt skips JSON whitespace from b[i].
func wsAt(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// validString checks the string starting at b[i] == '"' and returns the
// index just past its closing quote.
func validString(b []byte, i int) (int, bool) {
	for i++; ; {
		for i < len(b) && !strSpecial[b[i]] {
			i++
		}
		if i >= len(b) || b[i] < 0x20 {
			return i, false
		}
		if b[i] == '"' {
			return i + 1, true
		}
		// A backslash escape.
		if i+1 >= len(b) {
			return i, false
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if i+6 > len(b) {
				return i, false
			}
			for _, h := range b[i+2 : i+6] {
				if !isHex(h) {
					return i, false
				}
			}
			i += 6
		default:
			return i, false
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// validNumber checks the number starting at b[i].
func validNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	return i, true
}

// validLiteral checks that b[i:] starts with lit.
func validLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// validValue checks the JSON value starting at b[i] (no leading
// whitespace) and returns the index just past it. depth is the nesting
// depth the value sits at (0 at the top level). It never recurses: a
// bit per open container (object or array) on a fixed stack.
func validValue(b []byte, i, depth int) (int, bool) {
	const obj = 1
	var stack [maxDepth/8 + 1]byte
	n := 0 // open containers in this value
	push := func(kind byte) bool {
		if depth+n >= maxDepth {
			return false
		}
		stack[n/8] = stack[n/8]&^(1<<(n%8)) | kind<<(n%8)
		n++
		return true
	}
	top := func() byte { return stack[(n-1)/8] >> ((n - 1) % 8) & 1 }
	var ok bool
	for {
		// A value at b[i].
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '{':
			if !push(obj) {
				return i, false
			}
			if i = wsAt(b, i+1); i < len(b) && b[i] == '}' {
				i, n, ok = i+1, n-1, true
				break
			}
			if i, ok = objectKey(b, i); !ok {
				return i, false
			}
			continue
		case c == '[':
			if !push(0) {
				return i, false
			}
			if i = wsAt(b, i+1); i < len(b) && b[i] == ']' {
				i, n, ok = i+1, n-1, true
				break
			}
			continue
		case c == '"':
			i, ok = validString(b, i)
		case c == '-' || isDigit(c):
			i, ok = validNumber(b, i)
		case c == 't':
			i, ok = validLiteral(b, i, "true")
		case c == 'f':
			i, ok = validLiteral(b, i, "false")
		case c == 'n':
			i, ok = validLiteral(b, i, "null")
		default:
			return i, false
		}
		if !ok {
			return i, false
		}
		// After a value: close containers or go on to the next element.
		for {
			if n == 0 {
				return i, true
			}
			if i = wsAt(b, i); i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				if i = wsAt(b, i+1); top() == obj {
					if i, ok = objectKey(b, i); !ok {
						return i, false
					}
				}
			case '}':
				if top() != obj {
					return i, false
				}
				i++
				n--
				continue
			case ']':
				if top() == obj {
					return i, false
				}
				i++
				n--
				continue
			default:
				return i, false
			}
			break
		}
	}
}

// objectKey checks `"key" :` at b[i] and returns the index of the value
// after the colon and any whitespace.
func objectKey(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := validString(b, i)
	if !ok {
		return i, false
	}
	if i = wsAt(b, i); i >= len(b) || b[i] != ':' {
		return i, false
	}
	return wsAt(b, i+1), true
}
