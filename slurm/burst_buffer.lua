--[[
GustFS for SLURM's burst_buffer/lua plugin (installed by slurm/install.sh).

What this file does: it reads a job's GustFS directives when the job is submitted,
rejects a job whose directives are wrong (sbatch prints the message), and hands the
directives to the job's environment (slurm_bb_paths), where the TaskProlog and
TaskEpilog (gust-task-prolog.sh, gust-task-epilog.sh) start GustFS on the job's
nodes, stage in before the batch script and stage out after it.

Why not more here: every hook of this plugin runs on the controller, data_in runs
before the job has nodes, and none can start a process on the compute nodes, where
GustFS lives (docs/DESIGN.md).

Directives (lines at the top of the batch script):
  #BB_LUA gustfs [rootdir=DIR] [mountdir=DIR]
  #BB_LUA gustfs_stage_in  SOURCE GUSTFS_PATH
  #BB_LUA gustfs_stage_out GUSTFS_PATH DESTINATION
rootdir must be one of ALLOWED_ROOTDIRS (node-local places the Epilog sweeps).
A job without "#BB_LUA gustfs" lines never reaches this file.
--]]

ALLOWED_ROOTDIRS = { "/tmp", "/dev/shm" }  -- @ALLOWED_ROOTDIRS@

local function words(s)
	local t = {}
	for w in s:gmatch("%S+") do t[#t + 1] = w end
	return t
end

local function check_path(n, what, p)
	if p == nil then
		return string.format("line %d: %s is missing", n, what)
	end
	if p:sub(1, 1) ~= "/" then
		return string.format("line %d: %s '%s' must be an absolute path", n, what, p)
	end
	if p:find("[,:]") then
		return string.format("line %d: %s '%s' may not contain ',' or ':'", n, what, p)
	end
	return nil
end

-- Returns the directives as a table, or nil and a message naming the line.
local function parse(job_script)
	local f, err = io.open(job_script, "r")
	if f == nil then
		return nil, "gustfs: cannot read the job script: " .. tostring(err)
	end
	local cfg = { on = false, stage_in = {}, stage_out = {}, rootdir = nil, mountdir = nil }
	local n = 0
	for line in f:lines() do
		n = n + 1
		local rest = line:match("^#BB_LUA%s+(.*)$")
		if rest ~= nil then
			local w = words(rest)
			local kw = w[1]
			if kw == "gustfs" then
				cfg.on = true
				for i = 2, #w do
					local k, v = w[i]:match("^([%w_]+)=(.+)$")
					if k == "rootdir" then
						local ok = false
						for _, a in ipairs(ALLOWED_ROOTDIRS) do
							if v == a then ok = true end
						end
						if not ok then
							f:close()
							return nil, string.format("gustfs: line %d: rootdir=%s is not one of: %s",
								n, v, table.concat(ALLOWED_ROOTDIRS, " "))
						end
						cfg.rootdir = v
					elseif k == "mountdir" then
						local e = check_path(n, "mountdir", v)
						if e then f:close() return nil, "gustfs: " .. e end
						cfg.mountdir = v
					else
						f:close()
						return nil, string.format("gustfs: line %d: unknown option '%s' (rootdir=DIR, mountdir=DIR)", n, w[i])
					end
				end
			elseif kw == "gustfs_stage_in" or kw == "gustfs_stage_out" then
				if #w ~= 3 then
					f:close()
					return nil, string.format("gustfs: line %d: %s takes SOURCE and DESTINATION", n, kw)
				end
				local e = check_path(n, "source", w[2]) or check_path(n, "destination", w[3])
				if e then f:close() return nil, "gustfs: " .. e end
				local list = (kw == "gustfs_stage_in") and cfg.stage_in or cfg.stage_out
				list[#list + 1] = w[2] .. ":" .. w[3]
			else
				f:close()
				return nil, string.format(
					"gustfs: line %d: unknown directive '%s' (gustfs, gustfs_stage_in, gustfs_stage_out)", n, tostring(kw))
			end
		end
	end
	f:close()
	if not cfg.on and (#cfg.stage_in > 0 or #cfg.stage_out > 0) then
		return nil, "gustfs: stage directives need a '#BB_LUA gustfs' line"
	end
	return cfg
end

function slurm_bb_job_process(job_script, uid, gid)
	local cfg, msg = parse(job_script)
	if cfg == nil then
		return slurm.ERROR, msg
	end
	return slurm.SUCCESS
end

function slurm_bb_paths(job_id, job_script, path_file, uid, gid)
	local cfg, msg = parse(job_script)
	if cfg == nil then
		return slurm.ERROR, msg
	end
	if not cfg.on then
		return slurm.SUCCESS
	end
	local f = io.open(path_file, "w")
	f:write("GUST_SITE_JOB=1\n")
	f:write("GUST_SITE_STAGE_IN=" .. table.concat(cfg.stage_in, ",") .. "\n")
	f:write("GUST_SITE_STAGE_OUT=" .. table.concat(cfg.stage_out, ",") .. "\n")
	f:write("GUST_SITE_ROOTDIR=" .. (cfg.rootdir or "/tmp") .. "\n")
	f:write("GUST_SITE_MOUNTDIR=" .. (cfg.mountdir or "/gustfs") .. "\n")
	f:close()
	return slurm.SUCCESS
end

-- Nothing to do on the controller in the other stages.
function slurm_bb_pools() return slurm.SUCCESS end
function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script) return slurm.SUCCESS end
function slurm_bb_data_in(job_id, job_script, uid, gid) return slurm.SUCCESS end
function slurm_bb_real_size(job_id, uid, gid) return slurm.SUCCESS end
function slurm_bb_pre_run(job_id, job_script, uid, gid) return slurm.SUCCESS end
function slurm_bb_post_run(job_id, job_script, uid, gid) return slurm.SUCCESS end
function slurm_bb_data_out(job_id, job_script, uid, gid) return slurm.SUCCESS end
function slurm_bb_job_teardown(job_id, job_script, hurry, uid, gid) return slurm.SUCCESS end
function slurm_bb_get_status(uid, gid, ...) return slurm.SUCCESS, "gustfs: see gust status in a job\n" end
