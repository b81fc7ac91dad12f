import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { entryArgs } from '../helpers/entry.ts'

const ROOT = join(import.meta.dirname, '..', '..')

describe('uWebSockets.js engine', () => {
  it('refuses to start on the slow JavaScript fallback, saying why and how to fix it', () => {
    const r = spawnSync(process.execPath, entryArgs('main'), {
      cwd: ROOT,
      env: {
        ...process.env,
        UWS_USE_FALLBACK: '1',
        PORT: '0',
        ADMIN_PORT: '0',
        DATABASE_URL: 'postgres://127.0.0.1:1/none',
      },
      encoding: 'utf8',
      timeout: 30_000,
    })
    expect(r.status).not.toBe(0)
    expect(r.stderr).toContain('TOLLGATE_UWS_NOT_NATIVE')
    expect(r.stderr).toMatch(/fell back to a slow JavaScript server/)
  })
})
