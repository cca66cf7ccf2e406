import ProxyProgram

await runTokendProxy()
