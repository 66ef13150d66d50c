// Command yaml-oracle reads one YAML document on stdin and prints it as JSON, or "error: ..." and
// exits 1: what the Pulumi CLI's YAML reader (gopkg.in/yaml.v3, into any) makes of it.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"gopkg.in/yaml.v3"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	var value any
	if err := yaml.Unmarshal(data, &value); err != nil {
		fail(err)
	}
	out, err := json.Marshal(value)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Printf("error: %v\n", err)
	os.Exit(1)
}
