package httpserve_test

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/goddp/ddp/internal/httpserve"
)

// A server on a free loopback port, within the default limits; Loopback
// tells a handler that its client came over loopback.
func Example() {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "loopback:", httpserve.Loopback(r))
	})
	srv, err := httpserve.Start(context.Background(), "127.0.0.1:0", mux, httpserve.DefaultLimits())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + srv.Addr().String() + "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.StatusCode, " ", string(b))
	fmt.Println(httpserve.DefaultLimits().MaxConns, httpserve.MaxProfile)
	// Output:
	// 200 loopback: true
	// 32 1m0s
}
