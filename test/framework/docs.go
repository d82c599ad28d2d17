package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// DocObject is one YAML document of a ```yaml block in a Markdown file.
type DocObject struct {
	// Where is file:line of the block.
	Where string
	// Object is the document; its apiVersion and kind may be empty when
	// the block is a fragment, which callers reject.
	Object *unstructured.Unstructured
}

// DocYAML returns every YAML document of every ```yaml block in path, in
// order, parsed strictly (a block that does not parse is an error).
func DocYAML(path string) ([]DocObject, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []DocObject
	var block bytes.Buffer
	in, start := false, 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```yaml":
			in, start = true, n
			block.Reset()
		case in && strings.TrimSpace(line) == "```":
			in = false
			for i, doc := range strings.Split(block.String(), "\n---\n") {
				if strings.TrimSpace(doc) == "" {
					continue
				}
				u := &unstructured.Unstructured{}
				if err := yaml.UnmarshalStrict([]byte(doc), &u.Object); err != nil {
					return nil, fmt.Errorf("%s:%d (document %d): %w", path, start, i+1, err)
				}
				out = append(out, DocObject{Where: fmt.Sprintf("%s:%d", path, start), Object: u})
			}
		case in:
			block.WriteString(line + "\n")
		}
	}
	if in {
		return nil, fmt.Errorf("%s:%d: unterminated yaml block", path, start)
	}
	return out, sc.Err()
}
