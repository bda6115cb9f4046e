// Command probe checks, from inside a pod, that the API server answers through the `kubernetes`
// Service: an HTTPS GET of /livez at $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, trusting
// the cluster CA and sending the pod's ServiceAccount token, both from the mounted ServiceAccount
// volume. It tries up to -attempts times, one second apart, and writes one line saying what it got
// to stdout and to the termination-message file (so the pod's status carries it). Exit 0 when
// /livez answered 200 "ok"; 1 otherwise.
//
// With -env it does nothing of that: it prints its environment, one sorted NAME=VALUE line each
// (what the container runtime gave it, CDI edits included), and then waits for SIGTERM or SIGINT
// and exits 0, so that the pod keeps running and its log shows that environment.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	attempts := flag.Int("attempts", 30, "tries before giving up, one second apart")
	path := flag.String("path", "/livez", "API server path to GET")
	message := flag.String("termination-log", "/dev/termination-log", "file for the result line")
	env := flag.Bool("env", false, "print the environment and wait for SIGTERM instead of probing")
	flag.Parse()

	if *env {
		printEnvironmentAndWait()
		return
	}

	line, err := probe(*attempts, *path)
	if err != nil {
		line = "probe failed: " + err.Error()
	}
	fmt.Println(line)
	_ = os.WriteFile(*message, []byte(line), 0o644)
	if err != nil {
		os.Exit(1)
	}
}

func probe(attempts int, path string) (string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return "", errors.New("KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
	}
	caPEM, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return "", err
	}
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		return "", err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return "", errors.New("no certificate in ca.crt")
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
	}
	url := "https://" + net.JoinHostPort(host, port) + path
	var last error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			time.Sleep(time.Second)
		}
		request, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		response, err := client.Do(request)
		if err != nil {
			last = err
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(response.Body, 256))
		response.Body.Close()
		text := strings.TrimSpace(string(body))
		if response.StatusCode == http.StatusOK && text == "ok" {
			return fmt.Sprintf("GET %s: %d %s", url, response.StatusCode, text), nil
		}
		last = fmt.Errorf("GET %s: %d %q", url, response.StatusCode, text)
	}
	return "", last
}

func printEnvironmentAndWait() {
	variables := os.Environ()
	sort.Strings(variables)
	fmt.Println(strings.Join(variables, "\n"))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
