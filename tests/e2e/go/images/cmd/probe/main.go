// Command probe is the small program the cluster in a box's test pods run (tests/e2e/images.py):
// a server that tells each client which address it came from, and the clients the tests exec.
//
//	probe serve PORT          TCP and UDP on PORT: every TCP connection is read to its end and
//	                          answered "from <client ip> bytes <n>"; every datagram "from <client ip>"
//	probe send HOST:PORT N    sends N bytes over TCP, closes its side, prints the answer
//	probe udp HOST:PORT       sends one datagram, prints the answer
//	probe lookup NAME [IP]    resolves NAME through the pod's /etc/resolv.conf (or the DNS server at
//	                          IP, port 53), prints the addresses
//
// Every client call gives up after three seconds and exits 1 with the reason.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

const timeout = 3 * time.Second

func main() {
	if len(os.Args) < 3 {
		fail(fmt.Errorf("usage: probe serve PORT | send HOST:PORT N | udp HOST:PORT | lookup NAME [IP]"))
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2])
	case "send":
		n := 0
		if len(os.Args) > 3 {
			n, err = strconv.Atoi(os.Args[3])
		}
		if err == nil {
			err = send(os.Args[2], n)
		}
	case "udp":
		err = udp(os.Args[2])
	case "lookup":
		server := ""
		if len(os.Args) > 3 {
			server = os.Args[3]
		}
		err = lookup(os.Args[2], server)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "probe:", err)
	os.Exit(1)
}

func host(addr net.Addr) string {
	h, _, _ := net.SplitHostPort(addr.String())
	return h
}

func serve(port string) error {
	listener, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	packets, err := net.ListenPacket("udp", ":"+port)
	if err != nil {
		return err
	}
	go func() {
		buffer := make([]byte, 65536)
		for {
			_, from, err := packets.ReadFrom(buffer)
			if err != nil {
				continue
			}
			packets.WriteTo([]byte("from "+host(from)+"\n"), from)
		}
	}()
	for {
		conn, err := listener.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(30 * time.Second))
			n, _ := io.Copy(io.Discard, conn)
			fmt.Fprintf(conn, "from %s bytes %d\n", host(conn.RemoteAddr()), n)
		}()
	}
}

func send(addr string, n int) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.Copy(conn, bytes.NewReader(make([]byte, n))); err != nil {
		return err
	}
	conn.(*net.TCPConn).CloseWrite()
	answer, err := io.ReadAll(conn)
	if err != nil {
		return err
	}
	fmt.Print(string(answer))
	return nil
}

func udp(addr string) error {
	conn, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("probe\n")); err != nil {
		return err
	}
	buffer := make([]byte, 512)
	n, err := conn.Read(buffer)
	if err != nil {
		return err
	}
	fmt.Print(string(buffer[:n]))
	return nil
}

func lookup(name, server string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resolver := net.DefaultResolver
	if server != "" {
		resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(server, "53"))
		}}
	}
	addresses, err := resolver.LookupHost(ctx, name)
	if err != nil {
		return err
	}
	fmt.Println(strings.Join(addresses, "\n"))
	return nil
}
