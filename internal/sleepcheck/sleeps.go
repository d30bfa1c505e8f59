package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
)

// sleeps returns the lines of src's time.Sleep calls that are not inside a
// synctest bubble: a function literal passed to synctest.Test (or Run).
func sleeps(path string, src []byte) ([]int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	timeName, synctestName := "", ""
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := ""
		if imp.Name != nil {
			name = imp.Name.Name
		}
		switch p {
		case "time":
			timeName = or(name, "time")
		case "testing/synctest":
			synctestName = or(name, "synctest")
		}
	}
	if timeName == "" {
		return nil, nil
	}
	var lines []int
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		if isCall(n, timeName, "Sleep") && !inBubble(stack, synctestName) {
			lines = append(lines, fset.Position(n.Pos()).Line)
		}
		stack = append(stack, n)
		return true
	})
	return lines, nil
}

// inBubble reports whether the innermost nodes in stack lie in a function
// literal passed to synctest.Test or synctest.Run.
func inBubble(stack []ast.Node, synctestName string) bool {
	if synctestName == "" {
		return false
	}
	for i := len(stack) - 1; i > 0; i-- {
		lit, ok := stack[i].(*ast.FuncLit)
		if !ok {
			continue
		}
		call, ok := stack[i-1].(*ast.CallExpr)
		if !ok || !(isCall(call, synctestName, "Test") || isCall(call, synctestName, "Run")) {
			continue
		}
		for _, a := range call.Args {
			if a == lit {
				return true
			}
		}
	}
	return false
}

// isCall reports whether n calls pkg.name.
func isCall(n ast.Node, pkg, name string) bool {
	call, ok := n.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
