// Whether a CLI module is the program being run (node/tsx src/cli/x.ts), not imported by a test.
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'

export function isMain(moduleUrl: string): boolean {
  const script = process.argv[1]
  return script !== undefined && moduleUrl === pathToFileURL(resolve(script)).href
}
