// Command protogen regenerates the Go code for nave's .proto files.
//
// It needs no protoc and no copies of Envoy's .proto files: the sources are
// compiled with protocompile, and imports that are not in this repository
// (Envoy's discovery messages, the well-known types) resolve to the file
// descriptors already compiled into the pinned Go modules in go.mod. The Go
// code is produced by protoc-gen-go and protoc-gen-go-grpc run as `go tool`,
// so their versions are the ones go.mod pins. Run it through `make generate`.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"

	// Registers envoy/service/discovery/v3/discovery.proto and its imports.
	_ "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

func main() {
	root := flag.String("root", ".", "directory the .proto import paths are relative to")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		log.Fatal("usage: protogen [-root DIR] PROTO_DIR...")
	}
	if err := run(*root, dirs); err != nil {
		log.Fatal(err)
	}
}

func run(root string, dirs []string) error {
	var files []string
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() && strings.HasSuffix(p, ".proto") {
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	sort.Strings(files)

	local := &protocompile.SourceResolver{ImportPaths: []string{root}}
	compiler := protocompile.Compiler{
		Resolver: protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
			if r, err := local.FindFileByPath(path); err == nil {
				return r, nil
			}
			d, err := protoregistry.GlobalFiles.FindFileByPath(path)
			if err != nil {
				return protocompile.SearchResult{}, fmt.Errorf("import %q: not in this repository nor in a linked Go module: %w", path, err)
			}
			return protocompile.SearchResult{Desc: d}, nil
		}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	compiled, err := compiler.Compile(context.Background(), files...)
	if err != nil {
		return err
	}

	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: files,
		Parameter:      proto.String("paths=source_relative"),
	}
	seen := map[string]bool{}
	for _, f := range compiled {
		addWithDeps(req, f, seen)
	}
	for _, plugin := range []string{"protoc-gen-go", "protoc-gen-go-grpc"} {
		if err := runPlugin(root, plugin, req); err != nil {
			return err
		}
	}
	return nil
}

// addWithDeps appends f's dependencies, then f, in the topological order
// plugins expect.
func addWithDeps(req *pluginpb.CodeGeneratorRequest, f protoreflect.FileDescriptor, seen map[string]bool) {
	if seen[f.Path()] {
		return
	}
	seen[f.Path()] = true
	imports := f.Imports()
	for i := 0; i < imports.Len(); i++ {
		addWithDeps(req, imports.Get(i).FileDescriptor, seen)
	}
	var fdp *descriptorpb.FileDescriptorProto
	if r, ok := f.(linker.Result); ok {
		fdp = r.FileDescriptorProto()
	} else {
		fdp = protodesc.ToFileDescriptorProto(f)
	}
	req.ProtoFile = append(req.ProtoFile, fdp)
}

func runPlugin(root, plugin string, req *pluginpb.CodeGeneratorRequest) error {
	in, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command("go", "tool", plugin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", plugin, err, stderr.String())
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(out.Bytes(), &resp); err != nil {
		return fmt.Errorf("%s: bad response: %w", plugin, err)
	}
	if resp.Error != nil {
		return errors.New(plugin + ": " + resp.GetError())
	}
	for _, f := range resp.File {
		p := filepath.Join(root, filepath.FromSlash(f.GetName()))
		if err := os.WriteFile(p, []byte(f.GetContent()), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", p)
	}
	return nil
}
