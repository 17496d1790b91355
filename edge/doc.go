// Package edge is the composition root of egbe-edge: it owns every
// listener, builds each subsystem from Config, wires the seams between them
// (positions from the realtime session to the voice SFU, POP utilisation
// from the streamer registry to admission, ...), and shuts everything down
// in order: readiness off, drain, close.
package edge
