// Package arch holds the module's architecture suite, tests only: it reads
// every non-test .go file of the module (build-tagged files included) and
// fails
//
//   - for a function outside tests over 80 lines or cyclomatic complexity
//     25, counted as gocyclo counts (TestFuncLimits);
//   - for an import of a package drawn in a higher layer, a package the
//     layer table places nowhere, an engine imported below the engine line,
//     or a library package importing two engines (TestLayers);
//   - when the folders disagree with the layers: a package under internal/
//     outside layer 0, a layer-0 package importing the module, a public tree
//     placed in layer 0, two packages of one name, or a package named other
//     than its directory (TestFolders).
//
// The layer table is the one in docs/architecture.md, under "## Layers": the
// suite parses it and fails, naming the line, when it is malformed or a
// pattern in it matches no package, so the picture a newcomer reads and the
// rule CI enforces are one table.
//
//	go test ./tests/arch/
package arch
