// The graphile-worker 0.18 side of the ground-truth workload, run by the Node 22 binary of
// .presets/.
//
//   node graphile_driver.mjs history DSN   add a few jobs and work them until none is runnable
//                                          (the history the exporter must not count)
//   node graphile_driver.mjs enqueue DSN   add the workload's jobs
//   node graphile_driver.mjs slow DSN      add one more slow job, on its last attempt
//   node graphile_driver.mjs work DSN [takeover]
//                                          run a real worker (run()) until SIGTERM or SIGKILL;
//                                          with takeover, its lock reset (resetLockedAt, which
//                                          frees jobs locked for over 4 h) runs within a second
//
// Every task writes what it did to the side table gw_truth, on its own connection and in its
// own transaction, before it returns or throws: the harness checks the library's rows and the
// preset's counts against it.
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

// graphile-worker lives in the .presets/ cache, and ESM ignores NODE_PATH: the harness says
// where it is.
const { makeWorkerUtils, run, runOnce } = await import(
  pathToFileURL(join(process.env.PRESETS_NODE_MODULES, 'graphile-worker', 'dist', 'index.js')).href
)

const IN_AN_HOUR = () => new Date(Date.now() + 3600_000)
const SOON = () => new Date(Date.now() + 3_000)

async function record (helpers, outcome) {
  await helpers.withPgClient((client) => client.query(
    'INSERT INTO gw_truth (task, job_id, attempt, outcome) VALUES ($1, $2, $3, $4)',
    [helpers.job.task_identifier, helpers.job.id, helpers.job.attempts, outcome]
  ))
}

const taskList = {
  ok: async (payload, helpers) => { await record(helpers, 'completed') },
  // Fails its first attempt; graphile retries it exp(1) s later and it succeeds.
  flaky: async (payload, helpers) => {
    if (helpers.job.attempts === 1) {
      await record(helpers, 'failed')
      throw new Error('flaky: first attempt fails')
    }
    await record(helpers, 'completed')
  },
  // Fails every attempt: dies once max_attempts is reached.
  bad: async (payload, helpers) => {
    await record(helpers, 'failed')
    throw new TypeError('bad: always fails')
  },
  later: async (payload, helpers) => { await record(helpers, 'completed') },
  parked: async (payload, helpers) => { await record(helpers, 'completed') },
  // The first attempt never returns: the harness SIGKILLs the worker while it runs, and the
  // lock stays until graphile takes the job over. A second attempt succeeds.
  slow: async (payload, helpers) => {
    if (helpers.job.attempts > 1) {
      await record(helpers, 'completed')
      return
    }
    await record(helpers, 'started-long')
    await new Promise((resolve) => setTimeout(resolve, 600_000))
  }
}

async function history (dsn) {
  const utils = await makeWorkerUtils({ connectionString: dsn })
  for (let n = 0; n < 3; n++) await utils.addJob('ok', { n })
  for (let n = 0; n < 2; n++) await utils.addJob('bad', { n }, { maxAttempts: 1 })
  await utils.release()
  await runOnce({ connectionString: dsn, taskList, noHandleSignals: true })
}

async function enqueue (dsn) {
  const utils = await makeWorkerUtils({ connectionString: dsn })
  for (let n = 0; n < 20; n++) await utils.addJob('ok', { n })
  for (let n = 0; n < 5; n++) await utils.addJob('flaky', { n }, { maxAttempts: 3 })
  for (let n = 0; n < 3; n++) await utils.addJob('bad', { n }, { maxAttempts: 2 })
  for (let n = 3; n < 5; n++) await utils.addJob('bad', { n }, { maxAttempts: 1 })
  for (let n = 0; n < 2; n++) await utils.addJob('later', { n }, { runAt: SOON() })
  for (let n = 0; n < 2; n++) await utils.addJob('parked', { n }, { runAt: IN_AN_HOUR() })
  // Taken over on its last attempt it dies; with one attempt left it is retried.
  await utils.addJob('slow', { n: 0 }, { maxAttempts: 1 })
  await utils.addJob('slow', { n: 1 }, { maxAttempts: 2 })
  await utils.release()
}

async function slow (dsn) {
  const utils = await makeWorkerUtils({ connectionString: dsn })
  await utils.addJob('slow', { n: 2 }, { maxAttempts: 1 })
  await utils.release()
}

async function work (dsn, takeover) {
  const resetLocked = takeover ? { minResetLockedInterval: 200, maxResetLockedInterval: 500 } : {}
  const runner = await run({
    connectionString: dsn,
    concurrency: 4,
    pollInterval: 200,
    noHandleSignals: true,
    taskList,
    ...resetLocked
  })
  console.log(JSON.stringify({ ready: true }))
  process.on('SIGTERM', async () => {
    await runner.stop()
    process.exit(0)
  })
  await runner.promise
}

const [command, dsn, role] = process.argv.slice(2)
if (command === 'history') await history(dsn)
else if (command === 'enqueue') await enqueue(dsn)
else if (command === 'slow') await slow(dsn)
else if (command === 'work') await work(dsn, role === 'takeover')
else {
  console.error('usage: graphile_driver.mjs history DSN | enqueue DSN | slow DSN | work DSN [takeover]')
  process.exit(2)
}
