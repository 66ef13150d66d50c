// The YAML reader the Pulumi CLI reads stack files with: gopkg.in/yaml.v3 at the version
// github.com/pulumi/pulumi/sdk/v3 v3.272.0 (requirements.txt's pulumi) requires, decoding into
// `any` as its encoding.YAML marshaler does, then JSON as the program receives it.
// tests/plan/test_yaml_oracle.py builds it and compares plan/stack_yaml.py with it.
module supercluster.dev/tests/yamloracle

go 1.23.0

require gopkg.in/yaml.v3 v3.0.1
