// Compiles the project's contracts with the pinned solc npm package into committed JSON artifacts
// (`npm run build:contracts`). Same sources and settings give byte-identical files, so a rebuild shows no diff.
import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import solc from 'solc'

const here = dirname(fileURLToPath(import.meta.url))

const contracts = [
  { source: 'TestUSDC.sol', contractName: 'TestUSDC', artifact: 'test-usdc.artifact.json' },
  { source: 'Disperse.sol', contractName: 'Disperse', artifact: 'disperse.artifact.json' },
] as const

interface SolcError {
  severity: 'error' | 'warning' | 'info'
  formattedMessage: string
}

interface SolcOutput {
  errors?: SolcError[]
  contracts?: Record<string, Record<string, { abi: unknown[]; evm: { bytecode: { object: string } } }>>
}

const input = {
  language: 'Solidity',
  sources: Object.fromEntries(
    contracts.map((c) => [c.source, { content: readFileSync(join(here, c.source), 'utf8') }]),
  ),
  settings: {
    // cancun: what anvil and Base both run; a newer default could emit opcodes an older node lacks.
    evmVersion: 'cancun',
    optimizer: { enabled: true, runs: 200 },
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
  },
}

const output = JSON.parse(solc.compile(JSON.stringify(input))) as SolcOutput
const errors = (output.errors ?? []).filter((e) => e.severity === 'error')
for (const e of output.errors ?? [])
  if (e.severity !== 'info') process.stderr.write(`${e.formattedMessage}\n`)
if (errors.length) {
  process.stderr.write(`build:contracts: ${errors.length} compile error(s)\n`)
  process.exit(1)
}

for (const c of contracts) {
  const compiled = output.contracts?.[c.source]?.[c.contractName]
  if (!compiled) throw new Error(`solc produced no output for ${c.contractName} in ${c.source}`)
  const artifact = {
    contractName: c.contractName,
    compiler: `solc ${solc.version()}`,
    abi: compiled.abi,
    bytecode: `0x${compiled.evm.bytecode.object}`,
  }
  writeFileSync(join(here, c.artifact), `${JSON.stringify(artifact, null, 2)}\n`)
  process.stdout.write(`wrote ${c.artifact} (${(compiled.evm.bytecode.object.length / 2) | 0} bytes)\n`)
}
