package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// DocCommand is one command of a ```sh block, backslash continuations
// joined.
type DocCommand struct {
	// Where is file:line of the command's first line.
	Where string
	// Line is the command without its trailing comment.
	Line string
	// Comment is the trailing comment after " # ", if any.
	Comment string
}

// DocStep is a page's next block in reading order: the objects of a
// ```yaml block, or the commands of a ```sh block, under the heading
// (## or ###) it follows.
type DocStep struct {
	Section  string
	Objects  []DocObject
	Commands []DocCommand
}

// DocYAML returns every YAML document of every ```yaml block in path, in
// order, parsed strictly (a block that does not parse is an error).
func DocYAML(path string) ([]DocObject, error) {
	steps, err := DocSteps(path)
	if err != nil {
		return nil, err
	}
	var out []DocObject
	for _, s := range steps {
		out = append(out, s.Objects...)
	}
	return out, nil
}

// DocSteps reads path's ```yaml and ```sh blocks in order: what a reader
// following the page applies and runs. Other blocks are left out.
func DocSteps(path string) ([]DocStep, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		out     []DocStep
		block   []string
		kind    string // "yaml", "sh", another language, or "" outside a block
		start   int
		section string
	)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case kind == "" && strings.HasPrefix(trimmed, "```"):
			kind, start, block = strings.TrimPrefix(trimmed, "```"), n, nil
			if kind == "" {
				kind = "text"
			}
		case kind != "" && trimmed == "```":
			step := DocStep{Section: section}
			switch kind {
			case "yaml":
				if step.Objects, err = parseYAMLBlock(path, start, block); err != nil {
					return nil, err
				}
			case "sh":
				step.Commands = parseShellBlock(path, start, block)
			}
			if len(step.Objects)+len(step.Commands) > 0 {
				out = append(out, step)
			}
			kind = ""
		case kind != "":
			block = append(block, line)
		case strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### "):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	if kind != "" {
		return nil, fmt.Errorf("%s:%d: unterminated %s block", path, start, kind)
	}
	return out, sc.Err()
}

func parseYAMLBlock(path string, start int, lines []string) ([]DocObject, error) {
	var out []DocObject
	for i, doc := range strings.Split(strings.Join(lines, "\n")+"\n", "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict([]byte(doc), &u.Object); err != nil {
			return nil, fmt.Errorf("%s:%d (document %d): %w", path, start, i+1, err)
		}
		out = append(out, DocObject{Where: fmt.Sprintf("%s:%d", path, start), Object: u})
	}
	return out, nil
}

// parseShellBlock splits a ```sh block into commands: comment lines and
// blank lines are left out, a line ending in a backslash continues on the
// next, and " # " starts a trailing comment (the pages' commands quote no
// " # ").
func parseShellBlock(path string, start int, lines []string) []DocCommand {
	var out []DocCommand
	var cur strings.Builder
	first := 0
	for i, line := range lines {
		t := strings.TrimSpace(line)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if cur.Len() == 0 {
			first = start + 1 + i
		}
		if cont, ok := strings.CutSuffix(t, "\\"); ok {
			cur.WriteString(strings.TrimSpace(cont) + " ")
			continue
		}
		cur.WriteString(t)
		cmd, comment, _ := strings.Cut(cur.String(), " # ")
		out = append(out, DocCommand{Where: fmt.Sprintf("%s:%d", path, first), Line: strings.TrimSpace(cmd), Comment: strings.TrimSpace(comment)})
		cur.Reset()
	}
	return out
}

// DocShell runs a page's commands as its reader would: with bash, oc and
// kubectl (both bin/kubectl: the pages' oc commands are kubectl's) and
// whatever else Bin holds on the PATH, against Kubeconfig's cluster.
type DocShell struct {
	Bin        string
	Kubeconfig string
}

// NewDocShell makes the PATH folder, in dir, for kubeconfig's cluster.
func NewDocShell(dir, kubeconfig string) (*DocShell, error) {
	kubectl, err := Binary("kubectl")
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"oc", "kubectl"} {
		if err := os.Symlink(kubectl, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	return &DocShell{Bin: dir, Kubeconfig: kubeconfig}, nil
}

// Run runs line (pipefail) with stdin and returns its stdout; its stderr
// is in the error.
func (s *DocShell) Run(ctx context.Context, line, stdin string) (string, error) {
	c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	c.Env = append(os.Environ(), "PATH="+s.Bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+s.Kubeconfig)
	c.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", line, err, errOut.String())
	}
	return out.String(), nil
}

// DocCommandsStarting returns the commands of path that start with prefix.
func DocCommandsStarting(path, prefix string) ([]DocCommand, error) {
	steps, err := DocSteps(path)
	if err != nil {
		return nil, err
	}
	var out []DocCommand
	for _, s := range steps {
		for _, c := range s.Commands {
			if strings.HasPrefix(c.Line, prefix) {
				out = append(out, c)
			}
		}
	}
	return out, nil
}
