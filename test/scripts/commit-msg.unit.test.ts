// The commit-msg check: subject at most 72 characters, a blank line, a body; run as git runs the hook.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
// @ts-expect-error: a plain .mjs script, no types
import { problems } from '../../scripts/check-commit-msg.mjs'

const ROOT = join(import.meta.dirname, '../..')
const dir = mkdtempSync(join(tmpdir(), 'tollgate-commit-msg-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

function hook(message: string) {
  const file = join(dir, 'COMMIT_EDITMSG')
  writeFileSync(file, message)
  return spawnSync(join(ROOT, 'scripts/git-hooks/commit-msg'), [file], { cwd: ROOT, encoding: 'utf8' })
}

describe('commit-msg check', () => {
  it('accepts a short subject with a body', () => {
    expect(hook('Fix the thing\n\nBecause it was broken; 3 tests.\n# git comment\n').status).toBe(0)
  })

  it('refuses a long subject, a missing blank line and a missing body, saying which', () => {
    const r = hook(`${'x'.repeat(73)}\n`)
    expect(r.status).toBe(1)
    expect(r.stderr).toContain('subject is 73 characters, at most 72')
    expect(r.stderr).toContain('no body')
    expect(problems('Subject\nbody glued on\n')).toEqual(['no blank line after the subject'])
    expect(problems('\n\nbody only\n')).toContain('empty subject')
    expect(problems(`${'é'.repeat(72)}\n\nbody\n`)).toEqual([])
  })

  it("lets git's merge and autosquash subjects through", () => {
    expect(problems("Merge branch 'wt/x'\n")).toEqual([])
    expect(problems('fixup! Fix the thing\n')).toEqual([])
  })
})
