// check.mjs -- validates rendered Kubernetes manifests offline, against the
// API's own schemas (the kubernetes-models package: types and validators
// generated from the Kubernetes OpenAPI document):
//
//   node check.mjs RENDERED.yaml...      (kubectl kustomize DIR > RENDERED.yaml)
//
// Two passes over every resource:
//   1. kubernetes-models' validate(): types, required fields, enums, formats;
//   2. the TypeScript compiler over `const r: IKind = {...}` for each one:
//      a field the API does not have (a typo) is an excess property of an
//      object literal, which validate() lets through and tsc refuses.
// A kind this does not know is an error too.  Prints one line per problem
// (FILE: KIND/NAME: what) and "ok N resources", exits 1 if any problem.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const problems = [];
const checked = [];                       // {file, id, mod, kind, doc}

// "apps/v1", "Deployment" -> the module kubernetes-models/apps/v1/Deployment, or null
async function model(apiVersion, kind) {
    const m = `kubernetes-models/${apiVersion}/${kind}`;
    try {
        const Model = (await import(m))[kind];
        return Model ? { mod: m, Model } : null;
    } catch {
        return null;
    }
}

for (const file of process.argv.slice(2)) {
    for (const d of parseAllDocuments(readFileSync(file, "utf8"))) {
        if (d.errors.length) {
            problems.push(`${file}: YAML: ${d.errors[0].message}`);
            continue;
        }
        const doc = d.toJS();
        if (doc == null)
            continue;
        const id = `${doc.kind}/${doc.metadata?.name ?? "?"}`;
        const found = doc.apiVersion && doc.kind ? await model(doc.apiVersion, doc.kind) : null;
        if (found == null) {
            problems.push(`${file}: ${id}: no schema for apiVersion ${doc.apiVersion} kind ${doc.kind}`);
            continue;
        }
        const { mod, Model } = found;
        try {
            new Model(doc).validate();
        } catch (e) {
            problems.push(`${file}: ${id}: ${e.message.split("\n")[0]}`);
        }
        checked.push({ file, id, mod, kind: doc.kind, doc });
    }
}

// pass 2: one line per resource, so a compiler error's line names it
if (checked.length) {
    const dir = mkdtempSync(join(here, ".check-"));   // beside node_modules, for the resolution
    const mods = [...new Set(checked.map((c) => c.mod))];
    const head = mods.map((m, i) => `import type { I${m.split("/").pop()} as T${i} } from "${m}";`);
    const body = checked.map((c, i) => `const r${i}: T${mods.indexOf(c.mod)} = ${JSON.stringify(c.doc)};`);
    const src = join(dir, "check.mts");
    writeFileSync(src, [...head, ...body, "export {};", ""].join("\n"));
    try {
        const tsc = join(here, "node_modules", "typescript", "bin", "tsc");
        execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--skipLibCheck", "--module", "node16",
            "--moduleResolution", "node16", "--typeRoots", join(here, "node_modules", "@types"), src],
            { cwd: here, encoding: "utf8", env: { ...process.env, NODE_PATH: join(here, "node_modules") } });
    } catch (e) {
        for (const line of String(e.stdout).split("\n")) {
            const m = /check\.mts\((\d+),\d+\): error TS\d+: (.*)/.exec(line);
            if (m) {
                const c = checked[Number(m[1]) - head.length - 1];
                problems.push(`${c ? c.file + ": " + c.id : "?"}: ${m[2]}`);
            } else if (line.trim() && !line.startsWith(" ")) {
                problems.push(`tsc: ${line}`);
            }
        }
    }
    rmSync(dir, { recursive: true, force: true });
}
for (const p of problems)
    console.log(p);
console.log(`${problems.length ? "failed" : "ok"} ${checked.length} resources, ${problems.length} problem(s)`);
process.exit(problems.length ? 1 : 0);
