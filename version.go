package ddp

// Version is the version of goddp this source tree is, in the module's
// semantic-versioning form. A "-dev" suffix means the changes after the
// last release, listed at the top of CHANGELOG.md under the version they
// will be released as. Binaries report it where the Go toolchain stamps no
// module version (a build inside the source tree reports "(devel)").
const Version = "v0.3.0-dev"
