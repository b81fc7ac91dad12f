// The Dockerfile: parsed into stages and checked (non-root, healthcheck on /readyz, built output, sources in
// the build context), and its build stage's steps run as a script in a temporary copy of the repository.
import { spawnSync } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'

const ROOT = join(import.meta.dirname, '../..')

interface Instruction {
  op: string
  args: string
}
interface Stage {
  name: string
  image: string
  steps: Instruction[]
}

function parseDockerfile(text: string): { args: Record<string, string>; stages: Stage[] } {
  const lines = text.replace(/\\\n/g, ' ').split('\n')
  const args: Record<string, string> = {}
  const stages: Stage[] = []
  for (const raw of lines) {
    const line = raw.trim()
    if (!line || line.startsWith('#')) continue
    const [, op, rest] = line.match(/^(\w+)\s+(.*)$/) ?? []
    if (!op) throw new Error(`cannot parse Dockerfile line: ${line}`)
    const upper = op.toUpperCase()
    if (upper === 'ARG' && stages.length === 0) {
      const [k, v] = rest!.split('=')
      args[k!] = v ?? ''
    } else if (upper === 'FROM') {
      const [, image, name] = rest!.match(/^(\S+)(?:\s+AS\s+(\S+))?$/i) ?? []
      const resolved = image!.replace(/\$\{(\w+)\}/g, (_, k) => args[k] ?? '')
      stages.push({ name: name ?? String(stages.length), image: resolved, steps: [] })
    } else {
      stages.at(-1)!.steps.push({ op: upper, args: rest! })
    }
  }
  return { args, stages }
}

const { stages } = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))
const build = stages[0]!
const runtime = stages.at(-1)!
const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'))

/** COPY sources from the build context (not --from=…). */
function contextCopies(stage: Stage): string[] {
  return stage.steps
    .filter((s) => s.op === 'COPY' && !s.args.includes('--from='))
    .flatMap((s) =>
      s.args
        .split(/\s+/)
        .filter((a) => !a.startsWith('--'))
        .slice(0, -1),
    )
}

describe('Dockerfile', () => {
  it('builds on node bookworm-slim in a build stage and a runtime stage', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2)
    for (const s of stages) expect(s.image).toMatch(/^node:20-bookworm-slim$/)
    const runs = build.steps.filter((s) => s.op === 'RUN').map((s) => s.args)
    expect(runs).toEqual([
      'npm ci --no-audit --no-fund',
      'npm run build',
      'npm prune --omit=dev --no-audit --no-fund && rm -rf node_modules/@foundry-rs node_modules/@electric-sql',
    ])
  })

  it('runs the built output as a non-root user, health-checked on /readyz of the admin port', () => {
    const get = (op: string) => runtime.steps.filter((s) => s.op === op).map((s) => s.args)
    const user = get('USER').at(-1)
    expect(user).toBeDefined()
    expect(user).not.toMatch(/^(root|0)(:|$)/)
    expect(get('HEALTHCHECK')[0]).toMatch(/\/readyz/)
    expect(get('HEALTHCHECK')[0]).toMatch(/ADMIN_PORT\|\|9464/)
    // The command `npm start` runs, node flags included: the image runs the server as the bench measures it.
    const start: string[] = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start.split(
      ' ',
    )
    expect(start.at(-1)).toBe('dist/main.js')
    expect(get('CMD')).toEqual([JSON.stringify(start).replaceAll('","', '", "')])
    expect(get('ENV')).toContain('NODE_ENV=production')
    // Every COPY --from names an earlier stage.
    for (const s of runtime.steps.filter((x) => x.args.includes('--from='))) {
      const from = s.args.match(/--from=(\S+)/)![1]
      expect(stages.slice(0, -1).map((x) => x.name)).toContain(from)
    }
  })

  it('copies only sources that exist and that .dockerignore lets into the build context', () => {
    const sources = contextCopies(build)
    expect(sources).toEqual(expect.arrayContaining(['package.json', 'package-lock.json', 'src', 'config']))
    for (const src of sources) {
      expect(existsSync(join(ROOT, src)), src).toBe(true)
      expect(ignored, `${src} is excluded by .dockerignore`).not.toContain(src)
    }
    // Secrets and local state never reach an image.
    expect(ignored).toEqual(expect.arrayContaining(['.env', '.data', 'node_modules', '.git']))
  })

  it('copies the dependency patches before the install, each made for the version it patches', () => {
    const pkgJson = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'))
    expect(pkgJson.scripts.postinstall).toBe('patch-package')
    // The install's postinstall applies them: copied after it, the image would run the unpatched driver.
    const install = build.steps.findIndex((s) => s.op === 'RUN' && s.args.startsWith('npm ci'))
    const before = contextCopies({ ...build, steps: build.steps.slice(0, install) })
    expect(before).toContain('patches')
    const patches = readdirSync(join(ROOT, 'patches')).filter((f) => f.endsWith('.patch'))
    expect(patches.length).toBeGreaterThan(0)
    for (const file of patches) {
      const [, name, version] = file.match(/^(.+)\+([^+]+)\.patch$/) ?? []
      const installed = JSON.parse(readFileSync(join(ROOT, 'node_modules', name!, 'package.json'), 'utf8'))
      expect(installed.version, file).toBe(version)
      expect(pkgJson.dependencies[name!], `${name} is pinned to the patched version`).toBe(version)
    }
  })

  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'))
  const hasBuild = typeof pkg.scripts?.build === 'string'
  if (!hasBuild) {
    console.warn(
      '[test/deploy/dockerfile] build steps not run: package.json has no "build" script yet (the Dockerfile runs `npm run build` and starts dist/main.js).',
    )
  }

  // `npm ci` is replaced by a link to the installed node_modules (no network, and nothing of the shared
  // install changes); `npm prune` is not run for the same reason. Everything else runs as written.
  it.skipIf(!hasBuild)(
    'its build steps produce dist/main.js, which starts and reads config/ from the image layout',
    () => {
      const app = mkdtempSync(join(tmpdir(), 'tollgate-image-'))
      try {
        for (const src of contextCopies(build)) cpSync(join(ROOT, src), join(app, src), { recursive: true })
        symlinkSync(join(ROOT, 'node_modules'), join(app, 'node_modules'), 'dir')
        for (const step of build.steps.filter((s) => s.op === 'RUN')) {
          // node_modules here is a link to the shared install: a step that changes it must never run.
          if (/^npm (ci|prune)\b/.test(step.args) || step.args.includes('node_modules')) continue
          const r = spawnSync('sh', ['-c', step.args], { cwd: app, encoding: 'utf8', timeout: 240_000 })
          expect(r.status, `${step.args}\n${r.stdout}\n${r.stderr}`).toBe(0)
        }
        for (const s of runtime.steps.filter((x) => x.op === 'COPY' && x.args.includes('--from='))) {
          const src = s.args.split(/\s+/).filter((a) => !a.startsWith('--'))[0]!
          expect(existsSync(src.replace(/^\/app/, app)), src).toBe(true)
        }
        // The image leaves out anvil and PGlite: nothing in the built code imports them statically (PGlite
        // is imported when the embedded database starts; anvil is a binary found when the dev chain starts).
        const statics = spawnSync('grep', ['-rlE', "from '@(electric-sql|foundry-rs)/", 'dist'], {
          cwd: app,
          encoding: 'utf8',
        })
        expect(statics.stdout).toBe('')
        // A bad setting makes the built entry point stop with the configuration exit code, naming it: the
        // module graph loads from dist/ and config/default.json is found where the image puts it.
        const r = spawnSync('node', ['dist/main.js'], {
          cwd: app,
          encoding: 'utf8',
          timeout: 30_000,
          env: { PATH: process.env.PATH, NODE_ENV: 'production', PORT: 'eighty' },
        })
        expect(r.stderr).toMatch(/server\.port/)
        expect(r.status).toBe(78)
      } finally {
        rmSync(app, { recursive: true, force: true })
      }
    },
    300_000,
  )
})
