// Compiles the project's contracts with the pinned solc npm package into committed JSON artifacts
// (`npm run build:contracts`). Same sources and settings give byte-identical files, so a rebuild shows no diff.
import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import solc from 'solc'

const here = dirname(fileURLToPath(import.meta.url))
const testContracts = join(here, '../../../test/chain/contracts')

// Disperse (a batch of transfers in one transaction, for the watcher and the payout gas measurement) and
// TestSmartWallet (an ERC-1271 contract payer) are test fixtures: the service never deploys them, so they
// live beside the tests.
const contracts = [
  { dir: here, source: 'TestUSDC.sol', contractName: 'TestUSDC', artifact: 'test-usdc.artifact.json' },
  // Installed with anvil_setCode at fixed addresses (x402 batch-settlement): the runtime code is what is set.
  {
    dir: here,
    source: 'BatchSettlement.sol',
    contractName: 'BatchSettlement',
    artifact: 'batch-settlement.artifact.json',
    runtime: true,
  },
  {
    dir: here,
    source: 'Erc3009DepositCollector.sol',
    contractName: 'Erc3009DepositCollector',
    artifact: 'erc3009-deposit-collector.artifact.json',
    runtime: true,
  },
  // x402 exact settlement, many authorizations per transaction: found on chain at its CREATE2 address.
  {
    dir: here,
    source: 'AuthorizationBatcher.sol',
    contractName: 'AuthorizationBatcher',
    artifact: 'authorization-batcher.artifact.json',
    runtime: true,
  },
  // x402 upto on the dev chain: Permit2 and the upto proxy at their canonical addresses (anvil_setCode), and
  // the batcher tollgate names as facilitator (CREATE2 on real networks, anvil_setCode on the dev chain).
  {
    dir: here,
    source: 'Permit2.sol',
    contractName: 'Permit2',
    artifact: 'permit2.artifact.json',
    runtime: true,
  },
  {
    dir: here,
    source: 'X402UptoPermit2Proxy.sol',
    contractName: 'X402UptoPermit2Proxy',
    artifact: 'x402-upto-permit2-proxy.artifact.json',
    runtime: true,
  },
  {
    dir: here,
    source: 'UptoSettlementBatcher.sol',
    contractName: 'UptoSettlementBatcher',
    artifact: 'upto-settlement-batcher.artifact.json',
    runtime: true,
  },
  {
    dir: testContracts,
    source: 'Disperse.sol',
    contractName: 'Disperse',
    artifact: 'disperse.artifact.json',
  },
  // Tests only: an ERC-1271 payer (test/data-plane/x402-v2.test.ts).
  {
    dir: testContracts,
    source: 'TestSmartWallet.sol',
    contractName: 'TestSmartWallet',
    artifact: 'test-smart-wallet.artifact.json',
  },
  // Tests only: its factory, for a payer signing before its wallet exists (ERC-6492).
  {
    dir: testContracts,
    source: 'TestSmartWalletFactory.sol',
    contractName: 'TestSmartWalletFactory',
    artifact: 'test-smart-wallet-factory.artifact.json',
  },
] as const satisfies ReadonlyArray<{
  dir: string
  source: string
  contractName: string
  artifact: string
  runtime?: true
}>

interface SolcError {
  severity: 'error' | 'warning' | 'info'
  formattedMessage: string
}

interface SolcOutput {
  errors?: SolcError[]
  contracts?: Record<
    string,
    Record<
      string,
      { abi: unknown[]; evm: { bytecode: { object: string }; deployedBytecode: { object: string } } }
    >
  >
}

const input = {
  language: 'Solidity',
  sources: Object.fromEntries(
    contracts.map((c) => [c.source, { content: readFileSync(join(c.dir, c.source), 'utf8') }]),
  ),
  settings: {
    // cancun: what anvil and Base both run; a newer default could emit opcodes an older node lacks.
    evmVersion: 'cancun',
    optimizer: { enabled: true, runs: 200 },
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } },
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
    ...('runtime' in c ? { deployedBytecode: `0x${compiled.evm.deployedBytecode.object}` } : {}),
  }
  writeFileSync(join(c.dir, c.artifact), `${JSON.stringify(artifact, null, 2)}\n`)
  process.stdout.write(`wrote ${c.artifact} (${(compiled.evm.bytecode.object.length / 2) | 0} bytes)\n`)
}
