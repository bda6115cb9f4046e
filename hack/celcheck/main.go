// Command celcheck evaluates DRA device selectors with the CEL environment kube-scheduler uses
// (k8s.io/dynamic-resource-allocation cel, at the version hack/build-binaries.sh pins), as the
// reference the Python evaluator in scheduler/dra/cel.py is compared against.
//
// Input on stdin, one JSON object per line:
//
//	{"expression": "...", "driver": "gpu.nvidia.com", "allowMultipleAllocations": false,
//	 "attributes": {"productName": {"string": "..."}, "gpu.nvidia.com/driverVersion": {"version": "550.1.0"}},
//	 "capacity": {"memory": {"value": "80Gi"}}}
//
// attributes and capacity use the API's JSON (resource.k8s.io/v1 DeviceAttribute and
// DeviceCapacity). Output on stdout, one JSON object per input line, in order:
// {"matches": true|false}, or {"error": "...", "stage": "input"|"compile"|"runtime"}.
// The compiler is the one the allocator gets (cel.NewCache -> GetCompiler with
// consumable capacity on, list-type attributes off, as in Kubernetes 1.37 by default); a
// compile error is reported as the allocator reports it, a runtime error after
// cel.EnhanceRuntimeError.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

type input struct {
	Expression               string                                                    `json:"expression"`
	Driver                   string                                                    `json:"driver"`
	AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
}

type output struct {
	Matches *bool  `json:"matches,omitempty"`
	Error   string `json:"error,omitempty"`
	Stage   string `json:"stage,omitempty"`
}

func evaluate(cache *cel.Cache, line []byte) output {
	var in input
	if err := json.Unmarshal(line, &in); err != nil {
		return output{Error: err.Error(), Stage: "input"}
	}
	expr := cache.GetOrCompile(in.Expression)
	if expr.Error != nil {
		return output{Error: fmt.Sprintf("CEL compile error: %v", expr.Error), Stage: "compile"}
	}
	matches, _, err := expr.DeviceMatches(context.Background(), cel.Device{
		Driver:                   in.Driver,
		AllowMultipleAllocations: in.AllowMultipleAllocations,
		Attributes:               in.Attributes,
		Capacity:                 in.Capacity,
	})
	if err != nil {
		return output{Error: fmt.Sprintf("CEL runtime error: %v", cel.EnhanceRuntimeError(err)), Stage: "runtime"}
	}
	return output{Matches: &matches}
}

func main() {
	cache := cel.NewCache(64, cel.Features{EnableConsumableCapacity: true})
	reader := bufio.NewReaderSize(os.Stdin, 1<<20)
	writer := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(writer)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) > 0 && !(len(line) == 1 && line[0] == '\n') {
			if encodeErr := encoder.Encode(evaluate(cache, line)); encodeErr != nil {
				fmt.Fprintln(os.Stderr, encodeErr)
				os.Exit(1)
			}
			// One answer per line, flushed, so that a caller may converse line by line.
			if flushErr := writer.Flush(); flushErr != nil {
				fmt.Fprintln(os.Stderr, flushErr)
				os.Exit(1)
			}
		}
		if err != nil {
			break
		}
	}
}
