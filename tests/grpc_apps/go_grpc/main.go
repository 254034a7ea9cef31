// A grpc-go server of knee.test.Echo (tests/protos/echo.proto) for knee's gRPC tests and
// experiments/grpc.toml, with no generated code: a hand-registered ServiceDesc and a codec
// that passes the message bytes through; the three request fields are read with protowire.
//
// Capacity by construction: a call holds one of -workers slots for its sleep (the request's
// sleep_ms, else -sleep-ms), so the server completes at most workers / sleep calls a second;
// calls beyond wait for a slot (gRPC's own streams limit is left at its default).
// text == "fail": the call ends with UNAVAILABLE (code 14) without sleeping.
//
//	go_grpc -listen 127.0.0.1:PORT [-workers N] [-sleep-ms S] [-cert C -key K]
//
// It prints "listening HOST:PORT" once it accepts connections, and stops on SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawCodec hands the handler the message's bytes as they came, and sends its bytes as is.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type echo struct {
	slots   chan struct{}
	sleepMs int
}

// request reads EchoRequest's text (1) and sleep_ms (2); other fields are skipped.
func request(b []byte) (text string, sleepMs int, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", 0, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return "", 0, protowire.ParseError(m)
			}
			text, b = string(v), b[m:]
		case num == 2 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return "", 0, protowire.ParseError(m)
			}
			sleepMs, b = int(int32(v)), b[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return "", 0, protowire.ParseError(m)
			}
			b = b[m:]
		}
	}
	return text, sleepMs, nil
}

func (e *echo) call(ctx context.Context, in []byte) ([]byte, error) {
	text, sleepMs, err := request(in)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "bad EchoRequest: %v", err)
	}
	if text == "fail" {
		return nil, status.Error(codes.Unavailable, "asked to fail")
	}
	if sleepMs <= 0 {
		sleepMs = e.sleepMs
	}
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-e.slots }()
	select {
	case <-time.After(time.Duration(sleepMs) * time.Millisecond):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), text), nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	workers := flag.Int("workers", 4, "calls served at once")
	sleepMs := flag.Int("sleep-ms", 10, "a call's sleep when its sleep_ms is 0")
	cert := flag.String("cert", "", "TLS certificate (PEM); with -key, serve TLS")
	key := flag.String("key", "", "TLS private key (PEM)")
	flag.Parse()
	if *workers < 1 {
		fmt.Fprintln(os.Stderr, "-workers must be >= 1")
		os.Exit(2)
	}
	opts := []grpc.ServerOption{grpc.ForceServerCodec(rawCodec{})}
	if *cert != "" {
		creds, err := credentials.NewServerTLSFromFile(*cert, *key)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	srv := grpc.NewServer(opts...)
	e := &echo{slots: make(chan struct{}, *workers), sleepMs: *sleepMs}
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "knee.test.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Call",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				out, err := e.call(ctx, in)
				if err != nil {
					return nil, err
				}
				return &out, nil
			},
		}},
		Metadata: "echo.proto",
	}, e)
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening %s\n", lis.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		srv.Stop()
	}()
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
