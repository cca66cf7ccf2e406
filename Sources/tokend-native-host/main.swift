import NativeHostProgram

await runNativeHost()
