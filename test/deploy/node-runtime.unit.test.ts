// The Node runtime story holds together: the Dockerfile's Node major is inside package.json's engines range,
// and the pinned uWebSockets.js build has a native binary for that major's ABI (the service refuses uWS's
// JavaScript fallback, so a Node without its binary cannot serve).
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { describe, expect, it } from 'vitest'

const ROOT = join(import.meta.dirname, '../..')
// NODE_MODULE_VERSION of each Node major (nodejs.org/en/download/releases).
const ABI: Record<number, number> = { 18: 108, 20: 115, 22: 127, 24: 137 }

const dockerMajor = Number(
  readFileSync(join(ROOT, 'Dockerfile'), 'utf8').match(/^ARG NODE_VERSION=(\d+)/m)?.[1],
)
const engines: string = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).engines.node
const uwsDir = dirname(createRequire(join(ROOT, 'package.json')).resolve('uWebSockets.js/package.json'))

const hasBinary = (major: number) => existsSync(join(uwsDir, 'binaries', `uws_linux_x64_${ABI[major]}.node`))

describe('Node runtime', () => {
  it("the Dockerfile's Node has a uWebSockets.js binary", () => {
    expect(ABI[dockerMajor]).toBeDefined()
    expect(hasBinary(dockerMajor)).toBe(true)
  })

  it("package.json's engines names that major and no major without a binary", () => {
    expect(engines).toBe(`^${dockerMajor}.19.0`)
    for (const major of [18, 20, 22, 24]) {
      if (major === dockerMajor) continue
      // Any major engines admitted would need its binary; ^20.19.0 admits only 20.x.
      if (hasBinary(major)) continue
      expect(engines.startsWith(`^${major}`) || engines.includes(`>=${major}`)).toBe(false)
    }
  })

  it('the machine running the tests has its binary (the check can fail on a Node without one)', () => {
    const abi = Number(process.versions.modules)
    expect(existsSync(join(uwsDir, 'binaries', `uws_linux_x64_${abi}.node`))).toBe(process.arch === 'x64')
  })
})
