// Command imagebuild makes the cluster in a box's container images (tests/e2e/images.py): one
// layer holding the given files, an entrypoint, and nothing else (the programs are static Go
// binaries). It writes the image as an archive `ctr images import` reads and prints the image's
// manifest digest.
//
//	imagebuild -ref REF -entrypoint /prog -archive PATH SRC=/DEST ...
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	ref := flag.String("ref", "", "the image's reference (registry/repository:tag)")
	entrypoint := flag.String("entrypoint", "", "the program the container runs")
	archive := flag.String("archive", "", "write the image to this archive")
	flag.Parse()
	if err := build(*ref, *entrypoint, *archive, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func build(ref, entrypoint, archive string, files []string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	layer, err := layerOf(files)
	if err != nil {
		return err
	}
	image, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	image = mutate.ConfigMediaType(image, types.OCIConfigJSON)
	file, err := image.ConfigFile()
	if err != nil {
		return err
	}
	file = file.DeepCopy()
	file.OS, file.Architecture = "linux", "amd64"
	file.Config.Entrypoint = []string{entrypoint}
	if image, err = mutate.ConfigFile(image, file); err != nil {
		return err
	}
	if err := tarball.WriteToFile(archive, tag, image); err != nil {
		return err
	}
	digest, err := image.Digest()
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

// layerOf is one uncompressed-then-gzipped layer holding each SRC=/DEST file, executable.
func layerOf(files []string) (v1.Layer, error) {
	var buffer bytes.Buffer
	writer := tar.NewWriter(&buffer)
	for _, spec := range files {
		source, dest, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want SRC=/DEST", spec)
		}
		data, err := os.ReadFile(source)
		if err != nil {
			return nil, err
		}
		header := &tar.Header{Name: strings.TrimPrefix(dest, "/"), Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}
		if err := writer.WriteHeader(header); err != nil {
			return nil, err
		}
		if _, err := writer.Write(data); err != nil {
			return nil, err
		}
	}
	if err := writer.Close(); err != nil {
		return nil, err
	}
	content := buffer.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(content)), nil },
		tarball.WithMediaType(types.OCILayer))
}
