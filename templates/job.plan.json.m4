m4_dnl job.plan.json.m4 - the plan as JSON, exactly as `ddpc plan --json` prints it.
m4_dnl compiler/plan.c writes the JSON (so the two can never differ); this
m4_dnl template only places it. JSON has no comments, so no banner.
M_PLAN_JSON_RAW
