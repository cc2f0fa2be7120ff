package hybridlimit_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The package maps: docs/architecture.md's table, the README's and doc.go's
// list. Each names every package of the module, from the bottom up, and a
// package's code imports only packages of its own row or the rows above it
// (its tests may import anything). TestPackageMap holds each to `go list`
// and to the imports: the tables are the data, so moving a package means
// moving its row, and nothing here.

const module = "github.com/hybridlimit/hybridlimit"

// listed is one package of the module as go list sees it.
type listed struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// goList lists the module's packages.
func goList(t *testing.T) map[string]listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	pkgs := map[string]listed{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		require.NoError(t, dec.Decode(&p))
		pkgs[rel(p.ImportPath)] = p
	}
	return pkgs
}

// rel is a package's path in the module: "hybrid", "internal/redistest",
// "hybridlimit" for the module's root.
func rel(importPath string) string {
	if importPath == module {
		return "hybridlimit"
	}
	return strings.TrimPrefix(importPath, module+"/")
}

// packageMap is a document's rows, from the bottom up: the package names
// (or patterns ending in /..., such as internal/...) of each.
type packageMap struct {
	doc  string
	rows [][]string
}

// rowOf returns the index of the row naming pkg, and how many names of the
// map match it.
func (m packageMap) rowOf(pkg string) (row, count int) {
	row = -1
	for i, names := range m.rows {
		for _, n := range names {
			if namesPackage(n, pkg) {
				if row < 0 {
					row = i
				}
				count++
			}
		}
	}
	return row, count
}

// namesPackage reports whether name, in a map, names pkg: the package itself, or
// a pattern dir/... of the packages under dir.
func namesPackage(name, pkg string) bool {
	dir, pattern := strings.CutSuffix(name, "/...")
	return name == pkg || pattern && strings.HasPrefix(pkg, dir+"/")
}

var backticked = regexp.MustCompile("`([^`]+)`")

// tableAfter reads the Markdown table that follows heading in file: the
// backticked names of column col (0-based) of each row.
func tableAfter(t *testing.T, file, heading string, col int) packageMap {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	m := packageMap{doc: file}
	found, inTable := false, false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if !found {
			found = line == heading
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) <= col || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		var names []string
		for _, n := range backticked.FindAllStringSubmatch(cells[col], -1) {
			names = append(names, n[1])
		}
		if len(names) > 0 {
			m.rows = append(m.rows, names)
		}
	}
	require.True(t, found, "%s: no heading %q", file, heading)
	require.NotEmpty(t, m.rows, "%s: no table after %q", file, heading)
	return m
}

// docList reads doc.go's package list: its items "  - a, b: what they do".
func docList(t *testing.T) packageMap {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	m := packageMap{doc: "doc.go"}
	for line := range strings.Lines(f.Doc.Text()) {
		item, ok := strings.CutPrefix(strings.TrimSpace(line), "- ")
		if !ok {
			continue
		}
		names, _, ok := strings.Cut(item, ":")
		require.True(t, ok, "doc.go: the item %q names its packages before a colon", item)
		var row []string
		for n := range strings.SplitSeq(names, ",") {
			row = append(row, strings.Trim(strings.TrimSpace(n), "`"))
		}
		m.rows = append(m.rows, row)
	}
	require.NotEmpty(t, m.rows, "doc.go: no package list")
	return m
}

func TestPackageMap(t *testing.T) {
	pkgs := goList(t)
	for _, m := range []packageMap{
		tableAfter(t, "docs/architecture.md", "## The packages", 1),
		tableAfter(t, "README.md", "## The packages underneath", 0),
		docList(t),
	} {
		t.Run(m.doc, func(t *testing.T) {
			for _, names := range m.rows {
				for _, n := range names {
					found := false
					for p := range pkgs {
						found = found || namesPackage(n, p)
					}
					assert.True(t, found, "%s names %q, which is no package of the module", m.doc, n)
				}
			}
			for p, info := range pkgs {
				row, count := m.rowOf(p)
				if !assert.Equal(t, 1, count, "%s names package %s in %d rows, want one", m.doc, p, count) || row < 0 {
					continue
				}
				for _, imp := range info.Imports {
					if !strings.HasPrefix(imp, module+"/") && imp != module {
						continue
					}
					if r, _ := m.rowOf(rel(imp)); r > row {
						t.Errorf("%s: %s imports %s, from a row below it (the map says it cannot)", m.doc, p, rel(imp))
					}
				}
			}
		})
	}
}

// Every package whose code starts a goroutine checks its tests for leaks
// with goleak (docs/architecture.md, "How the tests are tiered").
func TestPackagesThatStartGoroutinesCheckForLeaks(t *testing.T) {
	for p, info := range goList(t) {
		starts := false
		for _, name := range info.GoFiles {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(info.Dir, name), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			ast.Inspect(f, func(n ast.Node) bool {
				_, isGo := n.(*ast.GoStmt)
				starts = starts || isGo
				return !starts
			})
		}
		if starts {
			assert.True(t, slices.Contains(info.TestImports, "go.uber.org/goleak") || slices.Contains(info.XTestImports, "go.uber.org/goleak"),
				"%s starts goroutines and its tests do not check for leaks (goleak.VerifyTestMain)", p)
		}
	}
}
