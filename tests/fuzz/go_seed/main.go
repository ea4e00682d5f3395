// A small real Go program: its stripped binary is fuzz_go_binary's seed with the parts a
// synthetic ELF lacks (runtime.moduledata, type links and descriptors, a whole pclntab), so
// mutations reach the type-data reader. Shaped like the servers the agent reads: a connection
// type holding a map of streams.
package main

import "os"

type serverConn struct {
	conn    uintptr
	hs      *serverConn
	streams map[uint32]*stream
}

type stream struct {
	id uint32
	sc *serverConn
}

var keep = map[uint32]*stream{}

func main() {
	sc := &serverConn{streams: keep}
	keep[1] = &stream{id: 1, sc: sc}
	if len(os.Args) > 5 {
		os.Exit(int(sc.streams[1].id))
	}
}
