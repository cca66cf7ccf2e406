import TokenctlProgram

await runTokenctl()
