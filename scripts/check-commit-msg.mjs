#!/usr/bin/env node
// Commit messages: a subject of at most 72 characters saying what changed, a blank line, then a body saying
// why (and what it measured). Used as the commit-msg hook (git config core.hooksPath scripts/git-hooks) and
// over a range in CI: node scripts/check-commit-msg.mjs --range origin/main..HEAD. Exit 1 names each problem.
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'

export const MAX_SUBJECT = 72

/** The problems of one message, empty when it is fine; git's comment lines (#) are ignored. */
export function problems(message) {
  const lines = message
    .replace(/\r\n/g, '\n')
    .split('\n')
    .filter((l) => !l.startsWith('#'))
  while (lines.length && lines.at(-1).trim() === '') lines.pop()
  const subject = lines[0] ?? ''
  // Merges and autosquash markers are written by git and rewritten before they land.
  if (/^(Merge |fixup! |squash! |amend! )/.test(subject)) return []
  const found = []
  if (!subject.trim()) found.push('empty subject')
  if ([...subject].length > MAX_SUBJECT)
    found.push(`subject is ${[...subject].length} characters, at most ${MAX_SUBJECT}`)
  if (lines.length > 1 && lines[1].trim() !== '') found.push('no blank line after the subject')
  if (!lines.slice(1).some((l) => l.trim())) found.push('no body: say why, and what it measured')
  return found
}

function main(argv) {
  if (argv[0] === '--help' || argv.length === 0) {
    process.stdout.write('usage: check-commit-msg.mjs <message-file> | --range <rev-range>\n')
    return argv.length === 0 ? 2 : 0
  }
  const messages =
    argv[0] === '--range'
      ? execFileSync('git', ['log', '--format=%H%n%B%x00', argv[1]], { encoding: 'utf8' })
          .split('\0')
          .map((m) => m.replace(/^\n/, ''))
          .filter((m) => m.trim())
          .map((m) => ({ name: m.slice(0, 12), text: m.slice(m.indexOf('\n') + 1) }))
      : [{ name: argv[0], text: readFileSync(argv[0], 'utf8') }]
  let bad = 0
  for (const { name, text } of messages) {
    const found = problems(text)
    if (!found.length) continue
    bad++
    process.stderr.write(`${name}: ${text.split('\n')[0]}\n${found.map((p) => `  - ${p}\n`).join('')}`)
  }
  return bad ? 1 : 0
}

if (import.meta.url === `file://${process.argv[1]}`) process.exitCode = main(process.argv.slice(2))
