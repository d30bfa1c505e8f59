package main

import (
	"io"

	"github.com/spf13/cobra"
)

func newAnalyzeCmd(stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{Use: "analyze"}
}
